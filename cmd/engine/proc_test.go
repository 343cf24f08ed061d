package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/paddock-dev/paddock/testenv"
)

// TestCLIProc drives a process through engine sandbox proc: start prints
// its id, write sends escaped text, read --follow prints the output and
// exits with the process's code; bad ids are usage errors.
func TestCLIProc(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	pid := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "proc", "start", id, "--", "sh", "-c", "read x; sleep 0.2; echo got-$x; exit 4"))
	if list := mustCLI(t, url, "", "sandbox", "proc", "list", id); !strings.Contains(list, pid+"  ") || !strings.Contains(list, "running") {
		t.Fatalf("proc list:\n%s", list)
	}
	// The write prints what came back within its window, the read the rest.
	wrote := mustCLI(t, url, "", "sandbox", "proc", "write", id, pid, `abc\n`, "--yield", "0s")
	code, out, errs := cli(t, url, "", "sandbox", "proc", "read", id, pid, "--follow")
	if out = wrote + out; code != 4 || out != "got-abc\n" {
		t.Fatalf("read --follow: exit %d, stdout %q, stderr %q; want 4 and got-abc", code, out, errs)
	}
	for _, args := range [][]string{
		{"sandbox", "proc", "read", id, "x"},
		{"sandbox", "proc", "start", id},
		{"sandbox", "proc", "resize", id, pid, "big", "80"},
		{"sandbox", "proc", "frob", id},
	} {
		if code, _, errs := cli(t, url, "", args...); code != 2 || !strings.Contains(errs, "invalid_request") {
			t.Errorf("engine %s: exit %d, %q; want a usage error", strings.Join(args, " "), code, errs)
		}
	}
	if code, _, errs := cli(t, url, "", "sandbox", "proc", "kill", id, "99999"); code == 0 || !strings.Contains(errs, "not_found") {
		t.Errorf("kill of an unknown process: exit %d, %q", code, errs)
	}
	code, out, errs = cli(t, url, "", "sandbox", "exec", id, "--stream", "--", "sh", "-c", "echo a; echo b >&2; exit 5")
	if code != 5 || out != "a\n" || errs != "b\n" {
		t.Errorf("exec --stream: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if got := unescape(`a\tb\n\x41\\\q`); string(got) != "a\tb\nA\\\\q" {
		t.Errorf("unescape: %q", got)
	}
}

// TestCLIShell runs engine sandbox shell on a pseudo-terminal, as a
// person would: keys typed reach the shell, the window's size follows a
// SIGWINCH, and the shell's exit code is the command's.
func TestCLIShell(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))

	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if err := pty.Setsize(slave, &pty.Winsize{Rows: 33, Cols: 99}); err != nil {
		t.Fatal(err)
	}
	screen := &testenv.SyncBuffer{}
	copied := make(chan struct{})
	go func() { // what the CLI writes to its terminal; ends when master closes
		defer close(copied)
		_, _ = io.Copy(screen, master)
	}()
	var errb testenv.SyncBuffer
	done := make(chan int, 1)
	ctx := testenv.Context(t, time.Minute)
	go func() { done <- run(ctx, []string{"--server", url, "sandbox", "shell", id}, slave, slave, &errb) }()

	see := func(want string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() error {
			if !strings.Contains(screen.String(), want) {
				return fmt.Errorf("%q not on the screen %q (stderr %q)", want, screen.String(), errb.String())
			}
			return nil
		})
	}
	type_ := func(s string) {
		t.Helper()
		if _, err := master.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// A person types once the prompt is there (what is typed before
	// the shell has set its terminal up may be discarded by it).
	testenv.Eventually(t, 20*time.Second, func() error {
		if s := screen.String(); !strings.Contains(s, "$ ") && !strings.Contains(s, "# ") {
			return fmt.Errorf("no prompt on the screen %q (stderr %q)", s, errb.String())
		}
		return nil
	})
	type_("echo sh''ell-$((6*7))\r")
	see("shell-42")
	type_("stty size\r")
	see("33 99")
	if err := pty.Setsize(slave, &pty.Winsize{Rows: 41, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	var typed time.Time
	testenv.Eventually(t, 20*time.Second, func() error {
		if time.Since(typed) > 500*time.Millisecond { // ask again now and then, not at every poll
			type_("stty size\r")
			typed = time.Now()
		}
		if !strings.Contains(screen.String(), "41 101") {
			return fmt.Errorf("no new size on the screen %q", screen.String())
		}
		return nil
	})
	type_("exit 7\r")
	select {
	case code := <-done:
		if code != 7 {
			t.Fatalf("shell exit %d, want 7 (stderr %q)", code, errb.String())
		}
	case <-ctx.Done():
		t.Fatalf("the shell did not end; screen %q", screen.String())
	}
	// The CLI's reader of its stdin is still in a read of the terminal
	// (it cannot be cancelled; a real CLI exits): a line ends it, and
	// then the terminal can close, which ends the copy of the screen.
	type_("\n")
	slave.Close()
	<-copied
}
