package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/cmd/internal/flagconfig"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/testenv"
)

// walk calls f for every command of the tree under c, c included.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}

// TestEveryCommandAnswersHelp: every command and group of the tree
// answers --help and -h with exit 0, on stdout, with its own usage.
func TestEveryCommandAnswersHelp(t *testing.T) {
	root := newRoot(context.Background(), &[]string{}, streams{})
	n := 0
	walk(root, func(c *cobra.Command) {
		for _, h := range []string{"--help", "-h"} {
			n++
			args := append(words(c), h)
			var out, errb bytes.Buffer
			code := run(context.Background(), args, strings.NewReader(""), &out, &errb)
			if code != 0 || errb.Len() != 0 || !strings.Contains(out.String(), "Usage") {
				t.Errorf("engine %s: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", strings.Join(args, " "), code, out.String(), errb.String())
			}
		}
	})
	if n < 100 {
		t.Errorf("walked %d help calls; want one per command and group (over 50 commands)", n)
	}
}

// TestEveryLeafTakesJSON: every runnable command declares --json.
func TestEveryLeafTakesJSON(t *testing.T) {
	root := newRoot(context.Background(), &[]string{}, streams{})
	walk(root, func(c *cobra.Command) {
		if c.HasSubCommands() || c.Name() == "help" || c.Parent() != nil && c.Parent().Name() == "completion" {
			return
		}
		if c.Flags().Lookup("json") == nil {
			t.Errorf("engine %s has no --json", strings.Join(words(c), " "))
		}
	})
}

// TestVersion: --version and version print the build's version and the
// contract's.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, errs := cli(t, "", "", args...)
		if code != 0 || !strings.HasPrefix(out, "engine ") || !strings.Contains(out, "(contract "+commands.Version+")") {
			t.Errorf("engine %s = exit %d, %q, %q; want 0 and engine VERSION (contract %s)", args[0], code, out, errs, commands.Version)
		}
	}
	var v map[string]string
	if err := json.Unmarshal([]byte(mustCLI(t, "", "", "version", "--json")), &v); err != nil || v["contract"] != commands.Version || v["version"] == "" {
		t.Errorf("version --json = %v, %v; want version and contract %s", v, err, commands.Version)
	}
}

// TestCompletion: the completion scripts generate.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		out := mustCLI(t, "", "", "completion", sh)
		if !strings.Contains(out, "engine") || len(out) < 500 {
			t.Errorf("completion %s printed %d bytes; want a script for engine", sh, len(out))
		}
	}
	// The tree completes: sandbox's commands after "engine sandbox ".
	out := mustCLI(t, "", "", "__complete", "sandbox", "pro")
	if !strings.Contains(out, "proc") {
		t.Errorf("__complete sandbox pro = %q; want proc", out)
	}
	out = mustCLI(t, "", "", "__complete", "sandbox", "exec", "--st")
	if !strings.Contains(out, "--stream") {
		t.Errorf("__complete sandbox exec --st = %q; want --stream", out)
	}
}

// TestExitCodes: sandbox exec exits with its command's code, with --json
// too; Paddock's own failures exit 125, a usage error 2.
func TestExitCodes(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create", "--runtime", "local"))
	if code, _, errs := cli(t, url, "", "sandbox", "exec", id, "--", "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("exec exit 3 = exit %d, %q; want 3", code, errs)
	}
	if code, _, errs := cli(t, url, "", "sandbox", "exec", id, "--", "sh", "-c", "exit 1"); code != 1 || errs != "" {
		t.Errorf("exec exit 1 = exit %d, %q; want 1 and nothing on stderr", code, errs)
	}
	code, stdout, _ := cli(t, url, "", "sandbox", "exec", id, "--json", "--", "sh", "-c", "echo hi; exit 3")
	var res commands.ExecResult
	if err := json.Unmarshal([]byte(stdout), &res); code != 3 || err != nil || res.ExitCode != 3 || res.Stdout != "hi\n" {
		t.Errorf("exec --json = exit %d, %q (%v); want 3 and the result", code, stdout, err)
	}
	code, stdout, _ = cli(t, url, "", "sandbox", "exec", id, "--stream", "--json", "--", "sh", "-c", "echo hi; exit 4")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 4 || len(lines) != 2 || lines[0] != `{"stream":"stdout","data":"hi\n"}` || !strings.Contains(lines[1], `"exit_code":4`) {
		t.Errorf("exec --stream --json = exit %d, %q; want 4, a chunk line and the result line", code, stdout)
	}
	var running map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "sandbox", "running", id, "--json")), &running); err != nil || running["running"] != true || running["session_id"] != id {
		t.Errorf("running --json = %v, %v", running, err)
	}
	var stopped statusResult
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "sandbox", "stop", id, "--json")), &stopped); err != nil || stopped != (statusResult{id, "stopped"}) {
		t.Errorf("stop --json = %+v, %v; want %s stopped", stopped, err, id)
	}
	if code, _, errs := cli(t, "nats://127.0.0.1:1", "", "sandbox", "exec", id, "--", "true"); code != 125 || !strings.HasPrefix(errs, "error: unavailable: ") {
		t.Errorf("exec with no server = exit %d, %q; want 125 and error: unavailable", code, errs)
	}
	for _, args := range [][]string{{"sandbox", "exec", id, "--bogus", "--", "true"}, {"sandbox", "nope"}, {"nope"}, {"sandbox"}} {
		if code, _, errs := cli(t, url, "", args...); code != 2 || !strings.HasPrefix(errs, "error: invalid_request: ") {
			t.Errorf("engine %s = exit %d, %q; want 2 and a usage error", strings.Join(args, " "), code, errs)
		}
	}
	// The flag package's one-dash long flags still parse.
	if code, out, errs := cli(t, url, "", "sandbox", "running", id, "-json"); code != 0 || !strings.Contains(out, `"running"`) {
		t.Errorf("running -json = exit %d, %q, %q; want the JSON", code, out, errs)
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-server", url, "sandbox", "running", id, "-json"}, strings.NewReader(""), &out, &out); code != 0 || !strings.Contains(out.String(), `"running"`) {
		t.Errorf("-server URL sandbox running -json = exit %d, %q; want the JSON", code, out.String())
	}
}

// TestConfigPrint: serve's settings come from flags, then the
// environment, then the configuration file, then the defaults; config
// print says which, masking secrets.
func TestConfigPrint(t *testing.T) {
	file := filepath.Join(t.TempDir(), "paddock.yaml")
	if err := os.WriteFile(file, []byte("listen: 127.0.0.1:5000\nreplicas: 3\nnode-ttl: 30s\nnats-url: nats://u:hunter2@h:4222\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PADDOCK_CONFIG", file)
	t.Setenv("PADDOCK_REPLICAS", "5")
	t.Setenv("PADDOCK_NODE_TTL", "20s")
	out := mustCLI(t, "", "", "config", "print", "--node-ttl", "15s", "--json")
	var got []flagconfig.Setting
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("config print --json = %q: %v", out, err)
	}
	want := map[string]flagconfig.Setting{
		"listen":    {Name: "listen", Value: "127.0.0.1:5000", Source: flagconfig.FromFile},
		"replicas":  {Name: "replicas", Value: "5", Source: flagconfig.FromEnv},
		"node-ttl":  {Name: "node-ttl", Value: "15s", Source: flagconfig.FromFlag},
		"sync":      {Name: "sync", Value: "always", Source: flagconfig.FromDefault},
		"nats-url":  {Name: "nats-url", Value: "nats://u:****@h:4222", Source: flagconfig.FromFile},
		"config":    {Name: "config", Value: file, Source: flagconfig.FromEnv},
		"state-dir": {Name: "state-dir", Value: auth.DefaultStateDir(), Source: flagconfig.FromDefault},
	}
	for _, s := range got {
		if w, ok := want[s.Name]; ok {
			if s != w {
				t.Errorf("config print: %+v, want %+v", s, w)
			}
			delete(want, s.Name)
		}
	}
	for name := range want {
		t.Errorf("config print does not list %s", name)
	}
	out = mustCLI(t, "", "", "config", "print")
	if !regexp.MustCompile(`(?m)^replicas\s+5\s+env$`).MatchString(out) || strings.Contains(out, "hunter2") {
		t.Errorf("config print =\n%s\nwant replicas 5 env, and no password", out)
	}
	// A key no flag has is an error, not a setting silently ignored.
	if err := os.WriteFile(file, []byte("listn: 127.0.0.1:5000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cli(t, "", "", "config", "print"); code != 2 || !strings.Contains(errs, `"listn" is not a setting`) {
		t.Errorf("config print with a misspelt key = exit %d, %q; want 2 naming it", code, errs)
	}
}

// TestHelpListsEveryLeaf: engine help names every command of the tree
// (alternatives as in "engine sandbox start|stop ID" count).
func TestHelpListsEveryLeaf(t *testing.T) {
	root := newRoot(context.Background(), &[]string{}, streams{})
	walk(root, func(c *cobra.Command) {
		w := words(c)
		if c.HasSubCommands() || len(w) == 0 || w[0] == "help" {
			return
		}
		pat := "engine"
		for _, word := range w {
			pat += ` (\S+\|)*` + regexp.QuoteMeta(word) + `(\|\S+)*`
		}
		if !regexp.MustCompile(pat + `(\s|,|$)`).MatchString(usage) {
			t.Errorf("engine help does not list engine %s", strings.Join(w, " "))
		}
	})
}
