package diskflags

import (
	"io"
	"testing"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/storage"
)

// TestFlags: the thresholds the flags take, the defaults written the way
// the flags read them, and bad values refused as invalid_request.
func TestFlags(t *testing.T) {
	parse := func(args ...string) (storage.Thresholds, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := Register(fs)
		if err := fs.Parse(args); err != nil {
			return storage.Thresholds{}, err
		}
		return f.Thresholds()
	}
	def, err := parse()
	if err != nil || def != storage.DefaultThresholds() {
		t.Fatalf("no flags: %+v, %v; want the defaults %+v", def, err, storage.DefaultThresholds())
	}
	for _, tc := range []struct {
		args []string
		want storage.Thresholds
	}{
		{[]string{"--disk-warn", "20%", "--disk-critical", "1g"}, storage.Thresholds{Warn: storage.Threshold{Percent: 20}, Critical: storage.Threshold{Bytes: 1 << 30}}},
		{[]string{"--disk-warn", "5%, 10g", "--disk-critical", "0.5%,100m"}, storage.Thresholds{Warn: storage.Threshold{Percent: 5, Bytes: 10 << 30}, Critical: storage.Threshold{Percent: 0.5, Bytes: 100 << 20}}},
	} {
		got, err := parse(tc.args...)
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--disk-warn", "0%"}, {"--disk-warn", "101%"}, {"--disk-warn", "10%,20%"}, {"--disk-critical", "lots"},
		{"--disk-critical", "0"}, {"--disk-critical", "1g,2g"}, {"--disk-critical", ""}, {"--disk-interval", "0s"},
	} {
		if _, err := parse(args...); errcode.Of(err) != errcode.InvalidRequest {
			t.Errorf("%q: %v, want invalid_request", args, err)
		}
	}
}
