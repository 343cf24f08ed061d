package docker_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/testenv"
)

// TestOutputFlood: a command that floods stdout is capped in memory and
// counted in full, whether it ends by itself or at its timeout.
func TestOutputFlood(t *testing.T) {
	sb := sandbox(t)
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"head", "-c", "50000000", "/dev/zero"}, MaxOutput: 1000, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1000 || res.StdoutBytes != 50000000 || !res.StdoutTruncated {
		t.Errorf("head: kept %d, counted %d, truncated %v; want 1000, 50000000, true", len(res.Stdout), res.StdoutBytes, res.StdoutTruncated)
	}
	res, err = sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"yes"}, MaxOutput: 1000, Timeout: 2 * time.Second})
	wantCode(t, "yes past its timeout", err, errcode.ExecTimeout)
	if !bytes.Equal(res.Stdout, bytes.Repeat([]byte("y\n"), 500)) || res.StdoutBytes <= 1000 || !res.StdoutTruncated {
		t.Errorf("yes: kept %.20q... (%d bytes), counted %d, truncated %v; want 1000 bytes of y lines, more counted, truncated",
			res.Stdout, len(res.Stdout), res.StdoutBytes, res.StdoutTruncated)
	}
	noProcess(t, sb, "yes")
}

// TestNeverEnds: a command that never ends is killed at its timeout, with
// nothing of it left running.
func TestNeverEnds(t *testing.T) {
	sb := sandbox(t)
	for _, argv := range [][]string{
		{"sleep", "100000"},
		{"sh", "-c", "sleep 100001 & (sleep 100002 &) ; sleep 100003"},
	} {
		_, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: argv, Timeout: time.Second})
		wantCode(t, strings.Join(argv, " "), err, errcode.ExecTimeout)
	}
	noProcess(t, sb, "sleep 10000")
}

// TestForkBomb: a fork bomb hits the pids limit; its exec ends at the
// timeout, the sandbox answers again, and so does another sandbox.
func TestForkBomb(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt := newRuntime(t)
	s := spec(rt, image)
	s.PidsLimit = 64
	sb := create(t, rt, s)
	other := create(t, rt, spec(rt, image))
	_, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "b(){ b | b & }; b; sleep 100000"}, Timeout: 5 * time.Second})
	if code := errcode.Of(err); code != errcode.ExecTimeout {
		t.Errorf("fork bomb: got %v, want exec_timeout", err)
	}
	if got := sh(t, other, "echo ok"); got != "ok\n" {
		t.Errorf("other sandbox after the bomb: got %q", got)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"echo", "ok"}, Timeout: 10 * time.Second})
		if err != nil {
			return err
		}
		if string(res.Stdout) != "ok\n" {
			return errcode.New(errcode.Internal, "echo printed %q (stderr %q)", res.Stdout, res.Stderr)
		}
		return nil
	})
	// The bomb itself is gone: only the container's own processes remain.
	noProcess(t, sb, "sh -c b")
}

// TestExecLeftovers: what a command leaves running in its session neither
// delays the result nor outlives it (as on the local runtime); Docker alone
// would hold the exec open for its 2s drain and keep the child.
func TestExecLeftovers(t *testing.T) {
	sb := sandbox(t)
	start := time.Now()
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "sleep 100004 & sleep 100005 >/dev/null 2>&1 & echo started"}})
	if err != nil || string(res.Stdout) != "started\n" || res.ExitCode != 0 {
		t.Fatalf("Exec: %q exit %d, %v", res.Stdout, res.ExitCode, err)
	}
	if d := time.Since(start); d >= 2*time.Second {
		t.Errorf("Exec returned after %s, want under Docker's 2s drain", d)
	}
	noProcess(t, sb, "sleep 10000[45]")
}

// TestExecResults: exit codes and messages of programs that do not run,
// users, and the wrapper staying out of the output.
func TestExecResults(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	sh(t, sb, "printf '#!/bin/sh\\necho hi\\n' > script.sh && mkdir sub")
	for _, tc := range []struct {
		argv   []string
		code   int
		stdout string
	}{
		{[]string{"./script.sh"}, 126, ""},
		{[]string{"./missing.sh"}, 127, ""},
		{[]string{"paddock-no-such-program"}, 127, ""},
		{[]string{"sh", "-c", "kill -9 $$"}, 137, ""},
		{[]string{"sh", "-c", "printf 12345"}, 0, "12345"},
		{[]string{"sh", "-c", "echo 1; exit 4"}, 4, "1\n"},
		{[]string{"printf", "%s\n", "a b", "c"}, 0, "a b\nc\n"},
	} {
		res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: tc.argv})
		if err != nil || res.ExitCode != tc.code || string(res.Stdout) != tc.stdout || res.StdoutBytes != int64(len(tc.stdout)) {
			t.Errorf("Exec %q: got exit %d stdout %q (%d bytes) stderr %q, %v; want exit %d stdout %q", tc.argv, res.ExitCode, res.Stdout, res.StdoutBytes, res.Stderr, err, tc.code, tc.stdout)
		}
	}
	res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"id", "-u"}, User: "0"})
	if err != nil || string(res.Stdout) != "0\n" {
		t.Errorf("id -u as 0: got %q, %v", res.Stdout, err)
	}
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"id"}, User: "nosuchuser"})
	wantCode(t, "Exec as an unknown user", err, errcode.InvalidRequest)
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}, Cwd: "script.sh"})
	wantCode(t, "cwd a file", err, errcode.InvalidRequest)
	_, err = sb.Exec(ctx, runtime.ExecSpec{})
	wantCode(t, "empty argv", err, errcode.InvalidRequest)
	// A timeout that fires before the command is under way still kills it.
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sleep", "100006"}, Timeout: time.Nanosecond})
	wantCode(t, "1ns timeout", err, errcode.ExecTimeout)
	noProcess(t, sb, "sleep 100006")
}
