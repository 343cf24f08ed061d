package flagconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	flag "github.com/spf13/pflag"
)

// flags is a small command's flag set: a string, an int, a repeatable
// list and --config.
func flags() (*flag.FlagSet, *string, *int, *[]string) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	s := fs.String("listen", "def", "")
	n := fs.Int("replicas", 1, "")
	l := fs.StringArray("pool", nil, "")
	fs.String("config", "", "")
	fs.String("nats-url", "", "")
	fs.String("route-secret", "", "")
	return fs, s, n, l
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrecedence: flag > env > file > default, per flag, each with its
// source; a list in the file sets a repeatable flag once per element;
// an alias names a flag by an older variable.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, "listen: file\nreplicas: 3\npool: [a, b]\nnats-url: nats://from-file\n")
	cases := []struct {
		name     string
		args     []string
		env      []string
		listen   string
		replicas int
		src      Sources
	}{
		{"file", nil, nil, "file", 3, Sources{"listen": FromFile, "replicas": FromFile, "pool": FromFile}},
		{"env over file", nil, []string{"PADDOCK_LISTEN=env", "OTHER_REPLICAS=9"}, "env", 3, Sources{"listen": FromEnv, "replicas": FromFile}},
		{"flag over env", []string{"--listen", "flag"}, []string{"PADDOCK_LISTEN=env", "PADDOCK_REPLICAS=5"}, "flag", 5, Sources{"listen": FromFlag, "replicas": FromEnv}},
		{"empty env is unset", nil, []string{"PADDOCK_LISTEN="}, "file", 3, Sources{"listen": FromFile}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs, s, n, l := flags()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			src, err := Apply(fs, Config{File: file, Prefix: "PADDOCK_", Skip: []string{"config"}, Environ: func() []string { return tc.env }})
			if err != nil {
				t.Fatal(err)
			}
			if *s != tc.listen || *n != tc.replicas || strings.Join(*l, ",") != "a,b" {
				t.Errorf("listen %q, replicas %d, pool %v; want %q, %d, [a b]", *s, *n, *l, tc.listen, tc.replicas)
			}
			for name, want := range tc.src {
				if src[name] != want {
					t.Errorf("source of %s = %s, want %s", name, src[name], want)
				}
			}
			if src["config"] != FromDefault {
				t.Errorf("source of config = %s, want default", src["config"])
			}
		})
	}
	fs, _, _, _ := flags()
	src, err := Apply(fs, Config{Prefix: "PADDOCK_", Aliases: map[string]string{"PADDOCK_URL": "nats-url"}, Environ: func() []string { return []string{"PADDOCK_URL=nats://alias"} }})
	if err != nil || fs.Lookup("nats-url").Value.String() != "nats://alias" || src["nats-url"] != FromEnv {
		t.Errorf("alias: nats-url %q from %s (%v); want nats://alias from env", fs.Lookup("nats-url").Value, src["nats-url"], err)
	}
}

// TestErrors: a key no flag has, a value a flag refuses and a file that
// is no YAML are errors that name them.
func TestErrors(t *testing.T) {
	for body, want := range map[string]string{
		"lisen: x\n":        `"lisen" is not a setting`,
		"config: other\n":   `"config" is not a setting`,
		"replicas: many\n":  "replicas",
		"listen: [a\n":      "c.yaml",
		"nested:\n  a: 1\n": "is not a setting",
	} {
		fs, _, _, _ := flags()
		_, err := Apply(fs, Config{File: writeFile(t, body), Skip: []string{"config"}, Environ: func() []string { return nil }})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("file %q: %v; want an error naming %q", body, err, want)
		}
	}
	// Paths that are no settings file: endless, a directory, too large,
	// missing. Each is an error at once (no hang, no memory filled).
	big := writeFile(t, "listen: x\n"+strings.Repeat("#", MaxFileBytes)+"\n")
	for path, want := range map[string]string{
		"/dev/zero":                             "not a regular file",
		t.TempDir():                             "not a regular file",
		big:                                     "larger than",
		filepath.Join(t.TempDir(), "none.yaml"): "no such file",
	} {
		fs, _, _, _ := flags()
		_, err := Apply(fs, Config{File: path, Skip: []string{"config"}, Environ: func() []string { return nil }})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("file %s: %v; want an error naming %q", path, err, want)
		}
	}

	fs, _, _, _ := flags()
	if _, err := Apply(fs, Config{Prefix: "P_", Environ: func() []string { return []string{"P_REPLICAS=x"} }}); err == nil || !strings.Contains(err.Error(), "P_REPLICAS") {
		t.Errorf("bad env value: %v; want an error naming P_REPLICAS", err)
	}
}

// TestEffectiveMasks: a secret's value and a URL's password are masked.
func TestEffectiveMasks(t *testing.T) {
	fs, _, _, _ := flags()
	if err := fs.Parse([]string{"--route-secret", "s3cret", "--nats-url", "nats://u:pw@a:1,nats://b:2"}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range Effective(fs, Sources{}, "pool") {
		got[s.Name] = s.Value
	}
	if got["route-secret"] != "****" || got["nats-url"] != "nats://u:****@a:1,nats://b:2" || got["listen"] != "def" {
		t.Errorf("effective = %v; want the secret and the password masked", got)
	}
	if _, ok := got["pool"]; ok {
		t.Errorf("effective lists pool, which it was told to skip")
	}
}
