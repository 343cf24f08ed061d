package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestEventsExportSDK runs a short workload through the CLI, exports its
// events in the OpenAI Agents SDK's format and has the SDK's own model
// (python3 with ../shared/pysdk) validate every line. The stored export
// of the same run is the stream's bytes, line for line.
func TestEventsExportSDK(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{Capture: nodes.Capture{Limit: 1024}}})
	url := st.Broker.ClientURL()
	const id = "sdk-export-1" // not a UUID: the export names it by one

	mustCLI(t, url, "", "sandbox", "create", "--runtime", "local", "--id", id)
	if code, out, errs := cli(t, url, "", "sandbox", "exec", id, "--", "sh", "-c", `printf 'a\377b'; exit 3`); code != 3 || out != "a\377b" {
		t.Fatalf("exec = exit %d, stdout %q, stderr %q; want 3 and %q", code, out, errs, "a\377b")
	}
	mustCLI(t, url, "hello\n", "sandbox", "write", id, "notes.txt")
	if out := mustCLI(t, url, "", "sandbox", "read", id, "notes.txt"); out != "hello\n" {
		t.Fatalf("read = %q, want %q", out, "hello\n")
	}
	if code, _, errs := cli(t, url, "", "sandbox", "read", id, "missing.txt"); code != exitFailure || !strings.HasPrefix(errs, "error: not_found: ") {
		t.Fatalf("read of a missing file = exit %d, stderr %q; want 125 and not_found", code, errs)
	}
	mustCLI(t, url, "", "sandbox", "persist", id)
	mustCLI(t, url, "", "sandbox", "stop", id)
	mustCLI(t, url, "", "sandbox", "resume", id)
	mustCLI(t, url, "", "sandbox", "ls", id)
	mustCLI(t, url, "", "sandbox", "shutdown", id)

	// --format stored (and the default) is the stream's bytes.
	ctx := testenv.Context(t, 30*time.Second)
	var stored []string
	if err := st.Log.Read(ctx, events.ReadOptions{Filters: []string{st.Log.Subjects().SessionFilter("default", id)}}, func(m events.Msg) error {
		stored = append(stored, string(m.Data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 20 { // 10 operations, a start and a finish each
		t.Fatalf("the stream holds %d events of the session, want 20", len(stored))
	}
	for _, args := range [][]string{{"events", "export", "--session", id}, {"events", "export", "--session", id, "--format", "stored"}} {
		got := strings.Split(strings.TrimSuffix(mustCLI(t, url, "", args...), "\n"), "\n")
		if len(got) != len(stored) {
			t.Fatalf("%s printed %d lines, want %d", strings.Join(args, " "), len(got), len(stored))
		}
		for i := range got {
			if got[i] != stored[i] {
				t.Fatalf("%s line %d = %s, want the stored bytes %s", strings.Join(args, " "), i+1, got[i], stored[i])
			}
		}
	}

	code, out, errs := cli(t, url, "", "events", "export", "--session", id, "--format", "sdk")
	if code != 0 {
		t.Fatalf("export --format sdk: exit %d, stderr %q", code, errs)
	}
	if want := "paddock: skipped 2 events of ops the OpenAI Agents SDK does not audit (ls 2)\n"; errs != want {
		t.Errorf("export --format sdk stderr = %q, want %q", errs, want)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 18 {
		t.Fatalf("export --format sdk printed %d lines, want 18 (20 events less ls's 2):\n%s", len(lines), out)
	}
	wantSession := events.SDKSessionID("default", id)
	var sawExit3, sawNotFound bool
	for i, l := range lines {
		var ev events.SDKEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d = %s: %v", i+1, l, err)
		}
		if ev.SessionID != wantSession || string(ev.Data["paddock.session_id"]) != `"`+id+`"` {
			t.Errorf("line %d: session_id %s, data paddock.session_id %s; want %s and %q", i+1, ev.SessionID, ev.Data["paddock.session_id"], wantSession, id)
		}
		if ev.SDKFinish == nil {
			continue
		}
		if ev.Op == "exec" && string(ev.Data["exit_code"]) == "3" {
			sawExit3 = true
			if ev.OK || ev.Stdout == nil || *ev.Stdout != "a\uFFFDb" {
				t.Errorf("exec finish = %s; want ok false and stdout %q", l, "a\uFFFDb")
			}
		}
		if ev.Op == "read" && ev.ErrorCode != nil {
			sawNotFound = true
			if *ev.ErrorCode != "workspace_read_not_found" || ev.ErrorType == nil || *ev.ErrorType != "paddock.not_found" {
				t.Errorf("failed read finish = %s; want error_code workspace_read_not_found, error_type paddock.not_found", l)
			}
		}
	}
	if !sawExit3 || !sawNotFound {
		t.Errorf("saw exec exit 3: %v, read not_found: %v; want both", sawExit3, sawNotFound)
	}

	file := filepath.Join(t.TempDir(), "events.sdk.jsonl")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	summary := validateWithSDK(t, file)
	t.Logf("the SDK's model: %s", summary)
}

// validateWithSDK runs testdata/validate_sdk_events.py on file with the
// OpenAI Agents SDK of the pysdk folder and returns what it printed. With
// no python3 or no pysdk folder it skips, unless CI=true.
func validateWithSDK(t *testing.T, file string) string {
	t.Helper()
	python, pysdk := pythonSDK(t)
	src := filepath.Join(pysdk, "openai-agents", "src")
	script, err := filepath.Abs(filepath.Join("testdata", "validate_sdk_events.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testenv.Context(t, 2*time.Minute), python, script, file)
	cmd.Env = append(os.Environ(),
		"PYTHONPATH="+filepath.Join(pysdk, "site")+string(os.PathListSeparator)+src,
		"PYTHONDONTWRITEBYTECODE=1",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the SDK's model refused the export: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// pythonSDK returns a python3 with pydantic 2 (PADDOCK_PYTHON, else python3
// on PATH) and the pysdk folder holding the OpenAI Agents SDK, nats.py and
// pytest (PADDOCK_PYSDK, else ../shared/pysdk beside the module). When
// either is missing the test is skipped, unless CI=true: then it fails.
func pythonSDK(t *testing.T) (python, pysdk string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format+" (CI=true: the SDK checks must run)", args...)
		}
		t.Skipf(format, args...)
	}
	// .ci/run picks an interpreter with pydantic 2, which the SDK needs.
	python = os.Getenv("PADDOCK_PYTHON")
	if python == "" {
		var err error
		if python, err = exec.LookPath("python3"); err != nil {
			missing("no python3 on PATH for the OpenAI Agents SDK")
		}
	}
	if out, err := exec.Command(python, "-c", "import pydantic; assert pydantic.VERSION >= '2'").CombinedOutput(); err != nil {
		missing("%s has no pydantic 2, which the OpenAI Agents SDK needs (set PADDOCK_PYTHON): %v %s", python, err, out)
	}
	pysdk = os.Getenv("PADDOCK_PYSDK")
	if pysdk == "" {
		root, err := moduleRootDir()
		if err != nil {
			t.Fatal(err)
		}
		pysdk = filepath.Join(root, "..", "shared", "pysdk")
	}
	if _, err := os.Stat(filepath.Join(pysdk, "openai-agents", "src", "agents", "sandbox", "session", "events.py")); err != nil {
		missing("no OpenAI Agents SDK at %s (set PADDOCK_PYSDK to the pysdk folder): %v", pysdk, err)
	}
	return python, pysdk
}

// moduleRootDir returns the directory holding go.mod, above the test's
// working directory.
func moduleRootDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

func TestEventsExportBadFormat(t *testing.T) {
	code, out, errs := cli(t, "nats://127.0.0.1:1", "", "events", "export", "--format", "nope")
	if code != 2 || errs != "error: invalid_request: --format \"nope\": want stored or sdk\n" || out != "" {
		t.Errorf("export --format nope = exit %d, stdout %q, stderr %q; want 2 and invalid_request naming stored and sdk", code, out, errs)
	}
}

// TestEventsExportSDKProviderShapes sends the commands the Python provider
// sends (argv ["sh","-lc",CMD] and ["sh","-c",CMD] with cwd and env, and a
// shell tool's command through proc_start, as the SDK's exec_command does
// on a session that supports PTYs) and checks that the SDK export has
// every one of them as an exec with its command, at start and at finish.
func TestEventsExportSDKProviderShapes(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	ctx := testenv.Context(t, time.Minute)
	const id = "sdk-provider-1"
	if _, err := st.Client.Create(ctx, commands.CreateArgs{SessionID: id, Runtime: "local"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Mkdir(ctx, id, "sub", false); err != nil {
		t.Fatal(err)
	}
	login := []string{"sh", "-lc", "echo hi > note.txt; exit 3"}
	if res, err := st.Client.Exec(ctx, id, commands.ExecArgs{Argv: login, Env: map[string]string{"GREETING": "hi"}}); err != nil || res.ExitCode != 3 {
		t.Fatalf("exec %q = %+v, %v; want exit 3", login, res, err)
	}
	plain := []string{"sh", "-c", "cat ../note.txt"}
	if res, err := st.Client.Exec(ctx, id, commands.ExecArgs{Argv: plain, Cwd: "sub", TimeoutMS: 30_000}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q = %+v, %v; want exit 0", plain, res, err)
	}
	shellTool := []string{"sh", "-lc", "echo from-pty; exit 5"}
	yield := int64(10_000)
	if res, err := st.Client.ProcStart(ctx, id, commands.ProcStartArgs{Argv: shellTool, TTY: true, YieldMS: &yield}); err != nil || res.Running || res.ExitCode == nil || *res.ExitCode != 5 {
		t.Fatalf("proc_start %q = %+v, %v; want it exited 5 within the yield", shellTool, res, err)
	}

	code, out, errs := cli(t, url, "", "events", "export", "--session", id, "--format", "sdk")
	if code != 0 {
		t.Fatalf("export --format sdk: exit %d, stderr %q", code, errs)
	}
	type execSeen struct {
		command  []string
		exitCode *int
		finished bool
	}
	seen := map[string]*execSeen{} // by span id
	var order []string
	for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var ev events.SDKEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d = %s: %v", i+1, l, err)
		}
		if ev.Op != "exec" {
			continue
		}
		var cmd []string
		if err := json.Unmarshal(ev.Data["command"], &cmd); err != nil {
			t.Errorf("line %d: exec %s without a command: %s", i+1, ev.Phase, l)
		}
		e := seen[ev.SpanID]
		if e == nil {
			e = &execSeen{command: cmd}
			seen[ev.SpanID] = e
			order = append(order, ev.SpanID)
		} else if strings.Join(e.command, "\x00") != strings.Join(cmd, "\x00") {
			t.Errorf("line %d: exec finish command %q, its start's %q", i+1, cmd, e.command)
		}
		if ev.SDKFinish != nil {
			e.finished = true
			if raw, ok := ev.Data["exit_code"]; ok {
				var c int
				if err := json.Unmarshal(raw, &c); err != nil {
					t.Errorf("line %d: exit_code %s", i+1, raw)
				}
				e.exitCode = &c
			}
		}
	}
	want := []struct {
		argv []string
		exit int
	}{{login, 3}, {plain, 0}, {shellTool, 5}}
	if len(order) != len(want) {
		t.Fatalf("export has %d execs, want %d (%q, %q, %q):\n%s", len(order), len(want), login, plain, shellTool, out)
	}
	for i, w := range want {
		e := seen[order[i]]
		if strings.Join(e.command, "\x00") != strings.Join(w.argv, "\x00") || !e.finished || e.exitCode == nil || *e.exitCode != w.exit {
			t.Errorf("exec %d: command %q finished %v exit %v; want %q exit %d", i+1, e.command, e.finished, e.exitCode, w.argv, w.exit)
		}
	}
	file := filepath.Join(t.TempDir(), "events.sdk.jsonl")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the SDK's model: %s", validateWithSDK(t, file))
}
