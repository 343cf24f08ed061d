package policyflags

import (
	"io"
	"testing"

	flag "github.com/spf13/pflag"
)

func TestPolicyFlags(t *testing.T) {
	parse := func(args ...string) (*Flags, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := Register(fs)
		return f, fs.Parse(args)
	}
	f, err := parse("--allow-image", "a/*", "--allow-image", "b", "--allow-network", "--max-memory", "4g", "--max-pids", "64", "--max-disk", "8g")
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Policy()
	if err != nil || len(p.Images) != 2 || !p.AllowNetwork || p.AllowRoot || p.MaxMemoryBytes != 4<<30 || p.MaxPids != 64 || p.MaxDiskBytes != 8<<30 {
		t.Fatalf("policy = %+v, %v", p, err)
	}
	for _, bad := range [][]string{{"--max-memory", "lots"}, {"--allow-image", "["}, {"--max-cpus", "-1"}, {"--max-disk", "-1g"}, {"--max-disk", "much"}} {
		f, err := parse(bad...)
		if err == nil {
			_, err = f.Policy()
		}
		if err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	f, _ = parse()
	if p, err := f.Policy(); err != nil || p.AllowNetwork || p.AllowRoot || len(p.Images) != 0 || p.MaxDiskBytes != 20<<30 {
		t.Fatalf("defaults = %+v, %v; want the closed policy", p, err)
	}
}
