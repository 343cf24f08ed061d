package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/cmd/internal/flagconfig"
	"github.com/paddock-dev/paddock/commands"
)

func runOut(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := runCLI(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

// TestHelpVersionCompletion: --help on stdout, --version with the
// contract's version, a bash completion script; a bad flag is a usage
// error.
func TestHelpVersionCompletion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"config", "print", "--help"}, {"version", "--help"}} {
		if out, errs, err := runOut(t, args...); err != nil || !strings.Contains(out, "Usage") || errs != "" {
			t.Errorf("agent-node %v = %v, %q, %q; want the usage on stdout", args, err, out, errs)
		}
	}
	if out, _, err := runOut(t, "--version"); err != nil || !strings.HasPrefix(out, "agent-node ") || !strings.HasSuffix(out, " (contract "+commands.Version+")\n") {
		t.Errorf("--version = %q, %v", out, err)
	}
	if out, _, err := runOut(t, "completion", "bash"); err != nil || !strings.Contains(out, "agent-node") {
		t.Errorf("completion bash = %d bytes, %v", len(out), err)
	}
	for _, args := range [][]string{{"--bogus"}, {"extra"}} {
		var u usageError
		if _, _, err := runOut(t, args...); err == nil || !errors.As(err, &u) {
			t.Errorf("agent-node %v = %v; want a usage error", args, err)
		}
	}
}

// TestConfigPrint: flag > env (PADDOCK_URL too) > file > default.
func TestConfigPrint(t *testing.T) {
	file := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(file, []byte("capacity: 7\nlabels: zone=a\nid: from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PADDOCK_URL", "nats://env:4222")
	t.Setenv("PADDOCK_LABELS", "zone=b")
	out, _, err := runOut(t, "config", "print", "--config", file, "--id", "flag-id", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got []flagconfig.Setting
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	want := map[string]flagconfig.Setting{
		"capacity": {Name: "capacity", Value: "7", Source: flagconfig.FromFile},
		"labels":   {Name: "labels", Value: "zone=b", Source: flagconfig.FromEnv},
		"nats-url": {Name: "nats-url", Value: "nats://env:4222", Source: flagconfig.FromEnv},
		"id":       {Name: "id", Value: "flag-id", Source: flagconfig.FromFlag},
		"runtime":  {Name: "runtime", Value: "auto", Source: flagconfig.FromDefault},
	}
	for _, s := range got {
		if w, ok := want[s.Name]; ok && s != w {
			t.Errorf("config print: %+v, want %+v", s, w)
		}
		delete(want, s.Name)
	}
	for name := range want {
		t.Errorf("config print does not list %s", name)
	}
}
