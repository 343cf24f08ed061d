package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// cli runs one CLI invocation against url and returns its exit code,
// stdout and stderr.
func cli(t *testing.T, url, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return cliWithin(t, 60*time.Second, url, stdin, args...)
}

// cliWithin runs the CLI as cli does, with d for the whole command
// rather than cli's minute: for a command that is given a longer
// --timeout of its own.
func cliWithin(t *testing.T, d time.Duration, url, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx := testenv.Context(t, d)
	code := run(ctx, append([]string{"--server", url}, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func mustCLI(t *testing.T, url, stdin string, args ...string) string {
	t.Helper()
	code, out, errs := cli(t, url, stdin, args...)
	if code != 0 {
		t.Fatalf("engine %s: exit %d, stderr %q", strings.Join(args, " "), code, errs)
	}
	return out
}

// TestCLITour runs the README's tour through the CLI against a stack.
func TestCLITour(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	tour(t, url)
}

func tour(t *testing.T, url string) {
	t.Helper()
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create", "--env", "NAME=paddock", "--secret-env", "TOKEN=hunter2", "--label", "team=a"))
	if commands.CheckToken("id", id) != nil {
		t.Fatalf("create printed %q, want a session id", id)
	}
	if out := mustCLI(t, url, "", "sandbox", "exec", id, "--", "sh", "-c", "echo hi $NAME"); out != "hi paddock\n" {
		t.Fatalf("exec stdout = %q, want %q", out, "hi paddock\n")
	}
	if out := mustCLI(t, url, "", "node", "list"); !strings.Contains(out, "NODE") || !strings.Contains(out, "up") {
		t.Fatalf("node list:\n%s", out)
	}
	code, _, _ := cli(t, url, "", "sandbox", "exec", id, "--", "sh", "-c", "exit 7")
	if code != 7 {
		t.Fatalf("exec exit code = %d, want 7", code)
	}
	code, _, errs := cli(t, url, "", "sandbox", "exec", id, "--timeout", "200ms", "--", "sleep", "30")
	if code != 124 || !strings.HasPrefix(errs, "error: exec_timeout: ") {
		t.Fatalf("exec past timeout = exit %d, stderr %q; want 124 and error: exec_timeout", code, errs)
	}
	mustCLI(t, url, "print('hello')\n", "sandbox", "write", id, "src/main.py")
	if out := mustCLI(t, url, "", "sandbox", "read", id, "src/main.py"); out != "print('hello')\n" {
		t.Fatalf("read = %q", out)
	}
	mustCLI(t, url, "", "sandbox", "mkdir", id, "a/b/c", "-p")
	out := mustCLI(t, url, "", "sandbox", "ls", id, "--json")
	var entries []commands.Entry
	if err := json.Unmarshal([]byte(out), &entries); err != nil || len(entries) != 2 || entries[0].Name != "a" || entries[1].Name != "src" {
		t.Fatalf("ls --json = %s (%v), want entries a and src", out, err)
	}
	if out := mustCLI(t, url, "", "sandbox", "ls", id, "src"); !regexp.MustCompile(`-rw-r--r--\s+15\s+.*main\.py`).MatchString(out) {
		t.Fatalf("ls src = %q, want a long listing of main.py", out)
	}
	mustCLI(t, url, "", "sandbox", "rm", id, "a", "-r")
	snapID := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "persist", id))
	if commands.CheckToken("snapshot", snapID) != nil {
		t.Fatalf("persist printed %q, want a snapshot id", snapID)
	}
	if out := mustCLI(t, url, "", "sandbox", "hydrate", id, "--snapshot", snapID); out != "2 members, 15 bytes\n" {
		t.Fatalf("hydrate printed %q", out)
	}
	code, _, errs = cli(t, url, "", "sandbox", "read", id, "../etc/passwd")
	if code != exitFailure || !strings.HasPrefix(errs, "error: invalid_path: ") {
		t.Fatalf("read escape = exit %d, stderr %q; want 125 and error: invalid_path", code, errs)
	}
	if out := mustCLI(t, url, "", "sandbox", "running", id); out != "true\n" {
		t.Fatalf("running = %q, want true", out)
	}
	mustCLI(t, url, "", "sandbox", "stop", id)
	if out := mustCLI(t, url, "", "sandbox", "running", id); out != "false\n" {
		t.Fatalf("running after stop = %q, want false", out)
	}
	if out := mustCLI(t, url, "", "sandbox", "resume", id); !strings.HasPrefix(out, "running on ") || !strings.Contains(out, "workspace kept") {
		t.Fatalf("resume after stop printed %q, want running with the workspace kept", out)
	}
	children := strings.Fields(mustCLI(t, url, "", "sandbox", "fork", id, "-n", "2"))
	if len(children) != 2 || commands.CheckToken("id", children[0]) != nil || children[0] == children[1] {
		t.Fatalf("fork -n 2 printed %q, want two session ids", children)
	}
	if out := mustCLI(t, url, "", "replay", "--tree", id); !strings.Contains(out, id) || !strings.Contains(out, children[0]) || !strings.Contains(out, children[1]) {
		t.Fatalf("replay --tree:\n%s\nwant the parent and both children", out)
	}
	if out := mustCLI(t, url, "", "sandbox", "diff", id); !strings.Contains(out, "+ ") {
		t.Fatalf("diff printed %q, want created paths", out)
	}
	for _, c := range children {
		mustCLI(t, url, "", "sandbox", "delete", c)
	}
	mustCLI(t, url, "", "sandbox", "shutdown", id)
	mustCLI(t, url, "", "sandbox", "delete", id)
	code, _, errs = cli(t, url, "", "sandbox", "running", id)
	if code != exitFailure || !strings.HasPrefix(errs, "error: session_not_found: ") {
		t.Fatalf("running after delete = exit %d, stderr %q; want session_not_found", code, errs)
	}

	out = mustCLI(t, url, "", "events", "tail", "--session", id, "--no-follow", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 40 { // 20 operations, a start and a finish each
		t.Fatalf("events tail printed %d lines, want 40:\n%s", len(lines), out)
	}
	for i, l := range lines {
		var ev events.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Seq != uint64(i+1) {
			t.Fatalf("line %d = %s (%v), want the event with seq %d", i, l, err, i+1)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Fatal("the secret value appears in the events")
	}
	out = mustCLI(t, url, "", "events", "tail", "--session", id, "--op", "exec", "--no-follow")
	if n := strings.Count(out, "\n"); n != 6 {
		t.Fatalf("events tail --op exec printed %d lines, want 6:\n%s", n, out)
	}
}

func TestCLIErrors(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bogus"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "explode", "x"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "exec", "x"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "read", "x"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "create", "--memory", "lots"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "create", "--cpus", "-1"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "create", "--runtime", "docker"}, exitFailure, "error: no_capacity: "},
		{[]string{"sandbox", "create", "--env", "novalue"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "running", "a.b"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "create", "--expose", "0"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "create", "--expose", "80,http"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "create", "--expose", "80", "--expose", "80"}, 2, "error: invalid_request: exposed port 80 is given twice"},
		{[]string{"sandbox", "port", "nope", "80"}, exitFailure, "error: session_not_found: "},
		{[]string{"sandbox", "port", "x", "http"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "port", "x"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "list", "--status", "gone"}, 2, "error: invalid_request: "},
		{[]string{"sandbox", "running", "nope"}, exitFailure, "error: session_not_found: "},
		{[]string{"sandbox", "running", "x", "--tenant", "a.>"}, 2, "error: invalid_request: "},
		{[]string{"events", "tail", "--session", "a*"}, 2, "error: invalid_request: "},
	} {
		code, _, errs := cli(t, url, "", tc.args...)
		if code != tc.code || !strings.HasPrefix(errs, tc.want) {
			t.Errorf("engine %s = exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, errs, tc.code, tc.want)
		}
	}
	// lost is a status to filter on (1.2); with no projector here the read,
	// not the flag, is what fails.
	if code, _, errs := cli(t, url, "", "sandbox", "list", "--status", "lost", "--wait", "100ms"); code != exitFailure || !strings.Contains(errs, "projection") {
		t.Errorf("sandbox list --status lost: exit %d, %q; want the flag taken and the missing projection named", code, errs)
	}
	code, _, errs := cli(t, "nats://127.0.0.1:1", "", "sandbox", "running", "x")
	if code != exitFailure || !strings.HasPrefix(errs, "error: unavailable: ") {
		t.Errorf("unreachable server = exit %d, stderr %q; want error: unavailable", code, errs)
	}
}

// startServe runs `engine serve args...` in-process until the test ends
// and returns its log.
func startServe(t *testing.T, args ...string) *testenv.SyncBuffer {
	t.Helper()
	logs, _ := serveStoppable(t, args...)
	return logs
}

// TestServeEmbedded: `engine serve` with its embedded NATS and local node
// is a whole system, and its state survives a restart on the same dir.
func TestServeEmbedded(t *testing.T) {
	dir := t.TempDir()
	logs := startServe(t, "--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local")
	m := regexp.MustCompile(`paddock engine ready" nats=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no listener URL in the log:\n%s", logs.String())
	}
	tour(t, m[1])
}

// TestServeExternalNATS: `engine serve --nats-url` runs against a
// separately started nats-server process.
func TestServeExternalNATS(t *testing.T) {
	url := testenv.StartNATSProcess(t)
	startServe(t, "--nats-url", url, "--state-dir", t.TempDir(), "--node-id", "n1", "--runtime", "local")
	tour(t, url)
}

// TestServeDocker: on a host with Docker, `engine serve` with its default
// --runtime auto runs sessions in containers of the base image, and the
// whole tour works the same.
func TestServeDocker(t *testing.T) {
	testenv.SandboxBaseImage(t)
	cli := testenv.DockerClient(t)
	node := "serve-" + uuid.NewString()[:8]
	t.Cleanup(func() { testenv.RemoveContainers(t, cli, "paddock.node="+node) })
	logs := startServe(t, "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--node-id", node)
	if !strings.Contains(logs.String(), "runtimes=[docker]") {
		t.Fatalf("serve did not pick Docker:\n%s", logs.String())
	}
	m := regexp.MustCompile(`paddock engine ready" nats=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no listener URL in the log:\n%s", logs.String())
	}
	tour(t, m[1])
}

func TestServeBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--sync", "sometimes"},
		{"--listen", "nope"},
		{"--events-max-bytes", "huge"},
		{"--sandbox-dir", "SAME/sandboxes"}, // inside the state dir
		{"--tenant-concurrency", "-1"},
		{"--capture-output", "-5"},
		{"--node-ttl", "500ms"},
		{"--partition-lease-ttl", "500ms"},
		{"--partition-lease-ttl", "-1s"},
		{"--auto-resume", "always"},
		{"--otlp-endpoint", "127.0.0.1:4318"}, // no scheme
		{"--egress-cluster-ports", "6222,70000"},
		{"--event-partitions", "33"},
		{"--event-partitions", "-1"},
	} {
		var errb bytes.Buffer
		state := t.TempDir()
		for i, a := range args {
			args[i] = strings.Replace(a, "SAME", state, 1)
		}
		code := run(context.Background(), append([]string{"serve", "--state-dir", state}, args...), nil, &errb, &errb)
		if code != 2 || !strings.Contains(errb.String(), "error: invalid_request: ") {
			t.Errorf("serve %v = exit %d, %q; want 2 and invalid_request", args, code, errb.String())
		}
	}
}

// TestHelpListsEveryOp: engine help names a sandbox command for every op
// of the contract.
func TestHelpListsEveryOp(t *testing.T) {
	// The CLI's words for the ops whose names it does not use.
	words := map[commands.Op]string{
		commands.OpProcStart: "proc start", commands.OpProcWrite: "proc write", commands.OpProcRead: "proc read",
		commands.OpProcResize: "proc resize", commands.OpProcSignal: "proc kill", commands.OpProcList: "proc list",
		commands.OpExecRead: "exec_read",
	}
	for _, op := range commands.SessionOps {
		w, ok := words[op]
		if !ok {
			w = string(op)
		}
		if !strings.Contains(usage, w) {
			t.Errorf("engine help does not mention %s (%q)", op, w)
		}
	}
}

// TestFormatEvent: a command that exited non-zero is not shown as a
// failed operation; a failure shows its code.
func TestFormatEvent(t *testing.T) {
	ok, notOK, code, dur := true, false, 3, 1.5
	ran := events.Event{Op: "exec", Phase: events.PhaseFinish, OK: &notOK, ExitCode: &code, DurationMS: &dur}
	if got := formatEvent(ran); !strings.Contains(got, " nonzero 1.5ms exit=3") || strings.Contains(got, "FAILED") {
		t.Errorf("exit 3: %q", got)
	}
	failed := events.Event{Op: "exec", Phase: events.PhaseFinish, OK: &notOK, ErrorCode: "exec_timeout"}
	if got := formatEvent(failed); !strings.Contains(got, " FAILED exec_timeout") {
		t.Errorf("timeout: %q", got)
	}
	done := events.Event{Op: "read", Phase: events.PhaseFinish, OK: &ok}
	if got := formatEvent(done); !strings.Contains(got, " ok") {
		t.Errorf("ok: %q", got)
	}
}

// TestHelpListsEveryCommand: every command the dispatcher knows, and every
// sandbox subcommand, is in `engine help`.
func TestHelpListsEveryCommand(t *testing.T) {
	var cmds [][]string
	for _, c := range newRoot(context.Background(), &[]string{}, streams{}).Commands() {
		cmds = append(cmds, []string{"", c.Name()})
	}
	if len(cmds) < 10 {
		t.Fatalf("found %d commands in the command tree; the pattern is stale", len(cmds))
	}
	for _, m := range cmds {
		if m[1] == "help" {
			continue
		}
		if !strings.Contains(usage, "engine "+m[1]) {
			t.Errorf("engine help does not list engine %s", m[1])
		}
	}
	for _, sub := range []string{"create", "exec", "write", "read", "ls", "rm", "mkdir", "running", "port", "start", "stop",
		"shutdown", "delete", "persist", "hydrate", "resume", "shell", "proc", "list", "inspect"} {
		if !regexp.MustCompile(`engine sandbox (\S+\|)*` + sub + `\b`).MatchString(usage) {
			t.Errorf("engine help does not list engine sandbox %s", sub)
		}
	}
	out := mustCLI(t, "", "", "help")
	if out != usage {
		t.Errorf("engine help printed something else than the usage")
	}
}
