package local_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/nodes/runtime/runtimetest"
	"github.com/paddock-dev/paddock/testenv"
)

func newRuntime(t *testing.T) *local.Runtime {
	t.Helper()
	rt, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return rt
}

func TestContract(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) runtime.Runtime { return newRuntime(t) }, runtimetest.Options{})
}

// create makes a sandbox of tenant "t" with a fresh session id and shuts it
// down when the test ends.
func create(t *testing.T, rt *local.Runtime, env map[string]string) (runtime.Sandbox, string) {
	t.Helper()
	session := uuid.NewString()
	sb, err := rt.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: session, Env: env})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		if err := sb.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return sb, session
}

func wantCode(t *testing.T, what string, err error, code errcode.Code) {
	t.Helper()
	if got := errcode.Of(err); got != code {
		t.Errorf("%s: got error %v (code %q), want code %q", what, err, got, code)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  local.Config
		fail bool
	}{
		{local.Config{Dir: "/x"}, false},
		{local.Config{Dir: "/x", DefaultTimeout: time.Second}, false},
		{local.Config{}, true},
		{local.Config{Dir: "/x", DefaultTimeout: -1}, true},
	} {
		if err := tc.cfg.Validate(); (err != nil) != tc.fail {
			t.Errorf("Validate(%+v): got %v, want failure %v", tc.cfg, err, tc.fail)
		}
	}
	if _, err := local.New(local.Config{}); err == nil {
		t.Errorf("New with no dir: got nil error, want one")
	}
}

func TestName(t *testing.T) {
	if got := newRuntime(t).Name(); got != "local" {
		t.Errorf("Name: got %q, want local", got)
	}
}

func TestShutdownRemovesSessionDir(t *testing.T) {
	rt := newRuntime(t)
	sb, session := create(t, rt, nil)
	ws := rt.WorkspaceDir("t", session)
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		t.Fatalf("workspace %s: got %v, want a directory", ws, err)
	}
	if err := sb.WriteFile(t.Context(), "locked/f", []byte("x"), 0o644); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	// A directory a command made unwritable does not stop the removal.
	if err := os.Chmod(filepath.Join(ws, "locked"), 0o500); err != nil {
		t.Fatal(err)
	}
	if err := sb.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(ws)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("session dir after Shutdown: got %v, want not exist", err)
	}
	_, _, err := sb.ReadFile(t.Context(), "locked/f", 10)
	wantCode(t, "ReadFile after Shutdown", err, errcode.InvalidState)
	wantCode(t, "WriteFile after Shutdown", sb.WriteFile(t.Context(), "g", nil, 0), errcode.InvalidState)
	wantCode(t, "Stop after Shutdown", sb.Stop(t.Context()), errcode.InvalidState)
}

func TestCreateExisting(t *testing.T) {
	rt := newRuntime(t)
	_, session := create(t, rt, nil)
	_, err := rt.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: session})
	wantCode(t, "Create existing", err, errcode.AlreadyExists)
	// The failed create left the existing sandbox alone.
	if _, err := os.Stat(rt.WorkspaceDir("t", session)); err != nil {
		t.Errorf("workspace after failed Create: %v", err)
	}
}

// TestReopen: a second runtime on the same directory reopens a session's
// workspace (its files there) once, refuses it while held, a missing one
// and bad ids, and its Shutdown removes the session directory.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	rt1, err := local.New(local.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sb1, err := rt1.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb1.WriteFile(t.Context(), "f", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt2, err := local.New(local.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := rt2.Reopen(runtime.Spec{Tenant: "t", SessionID: "s", Env: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	if data, _, err := sb.ReadFile(t.Context(), "f", 64); err != nil || string(data) != "kept" {
		t.Errorf("f after Reopen = %q, %v; want kept", data, err)
	}
	_, err = rt2.Reopen(runtime.Spec{Tenant: "t", SessionID: "s"})
	wantCode(t, "Reopen of a held session", err, errcode.AlreadyExists)
	_, err = rt2.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: "s"})
	wantCode(t, "Create of a reopened session", err, errcode.AlreadyExists)
	_, err = rt2.Reopen(runtime.Spec{Tenant: "t", SessionID: "missing"})
	wantCode(t, "Reopen of a missing workspace", err, errcode.NotFound)
	_, err = rt2.Reopen(runtime.Spec{Tenant: "..", SessionID: "s"})
	wantCode(t, "Reopen of a bad tenant", err, errcode.InvalidRequest)
	if err := sb.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "t", "s")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("session dir after Shutdown: %v; want not exist", err)
	}
}

func TestCreateBadNames(t *testing.T) {
	rt := newRuntime(t)
	for _, name := range []string{"", ".", "..", "../x", "a/b", `a\b`, "a\x00b"} {
		_, err := rt.Create(t.Context(), runtime.Spec{Tenant: name, SessionID: "s"})
		wantCode(t, "tenant "+strconv.Quote(name), err, errcode.InvalidRequest)
		_, err = rt.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: name})
		wantCode(t, "session "+strconv.Quote(name), err, errcode.InvalidRequest)
	}
}

// TestUserRefused: the local runtime cannot switch users, so it refuses a
// user instead of silently running as the node's.
func TestUserRefused(t *testing.T) {
	rt := newRuntime(t)
	_, err := rt.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: "u", User: "1000"})
	wantCode(t, "Create as user", err, errcode.InvalidRequest)
	if _, err := os.Stat(rt.WorkspaceDir("t", "u")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused Create left a workspace: %v", err)
	}
	sb, _ := create(t, rt, nil)
	_, err = sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"true"}, User: "0"})
	wantCode(t, "Exec as user", err, errcode.InvalidRequest)
}

func TestFileOpsOnStoppedSandbox(t *testing.T) {
	sb, _ := create(t, newRuntime(t), nil)
	ctx := t.Context()
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "f", []byte("stopped"), 0); err != nil {
		t.Fatalf("WriteFile while stopped: %v", err)
	}
	got, mode, err := sb.ReadFile(ctx, "f", 100)
	if err != nil || string(got) != "stopped" || mode != 0o644 {
		t.Errorf("ReadFile: got %q mode %o, %v, want %q mode 644 (the default), nil", got, mode, err, "stopped")
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("PADDOCK_HOST_ONLY", "leak")
	rt := newRuntime(t)
	sb, session := create(t, rt, map[string]string{"PATH": "/bin:/usr/bin"})
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", `printf '%s|%s|%s' "${PADDOCK_HOST_ONLY-unset}" "$HOME" "$PATH"`}})
	if err != nil {
		t.Fatal(err)
	}
	want := "unset|" + rt.WorkspaceDir("t", session) + "|/bin:/usr/bin"
	if got := string(res.Stdout); got != want {
		t.Errorf("environment: got %q, want %q", got, want)
	}
}

func TestExecStartFailures(t *testing.T) {
	sb, _ := create(t, newRuntime(t), nil)
	ctx := t.Context()
	if err := sb.WriteFile(ctx, "script.sh", []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv   []string
		code   int
		stderr string
	}{
		{[]string{"./script.sh"}, 126, "./script.sh: "},
		{[]string{"./missing.sh"}, 127, "./missing.sh: command not found\n"},
		{[]string{"paddock-no-such-program"}, 127, "paddock-no-such-program: command not found\n"},
		{[]string{"sh", "-c", "kill -9 $$"}, 137, ""},
	} {
		res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: tc.argv})
		if err != nil || res.ExitCode != tc.code || !strings.HasPrefix(string(res.Stderr), tc.stderr) {
			t.Errorf("Exec %q: got exit %d stderr %q, %v, want exit %d stderr %q..., nil", tc.argv, res.ExitCode, res.Stderr, err, tc.code, tc.stderr)
		}
	}
	if err := sb.WriteFile(ctx, "script.sh", []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"./script.sh"}}); err != nil || string(res.Stdout) != "hi\n" {
		t.Errorf("./script.sh: got %q, %v, want %q, nil", res.Stdout, err, "hi\n")
	}
	_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}, Cwd: "script.sh"})
	wantCode(t, "cwd a file", err, errcode.InvalidRequest)
}

// A background child the command leaves behind neither delays the result
// nor outlives it.
func TestExecKillsLeftovers(t *testing.T) {
	sb, _ := create(t, newRuntime(t), nil)
	start := time.Now()
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "sleep 100 & echo $!"}})
	if err != nil {
		t.Fatal(err)
	}
	// The output pipes are drained for up to 2s after the group is killed;
	// returning sooner shows the leftover did not hold them.
	if elapsed := time.Since(start); elapsed >= 2*time.Second {
		t.Errorf("Exec returned after %s, want under the 2s drain bound", elapsed)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("background child %d still alive", pid)
		}
		<-time.After(10 * time.Millisecond)
	}
}

// alive reports whether pid is a live process (a zombie awaiting its
// reaper is dead).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || (stat[i+2] != 'Z' && stat[i+2] != 'X')
}

func TestSymlinksInsideAreFollowed(t *testing.T) {
	sb, _ := create(t, newRuntime(t), nil)
	ctx := t.Context()
	if err := sb.WriteFile(ctx, "d/a.txt", []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", "ln -s d/a.txt link && ln -s d dlink && ln -s ../d d/self"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("ln: %+v, %v", res, err)
	}
	for _, p := range []string{"link", "dlink/a.txt", "d/self/self/a.txt"} {
		if got, _, err := sb.ReadFile(ctx, p, 100); err != nil || string(got) != "inside" {
			t.Errorf("ReadFile %s: got %q, %v, want %q, nil", p, got, err, "inside")
		}
	}
	// ls lists a symlink as the last component itself, and follows one on
	// the way.
	entries, err := sb.List(ctx, "dlink")
	if err != nil || len(entries) != 1 || entries[0].Name != "dlink" || entries[0].Type != "symlink" {
		t.Errorf("List dlink: got %+v, %v, want the symlink dlink itself", entries, err)
	}
	entries, err = sb.List(ctx, "dlink/self/self")
	if err != nil || len(entries) != 1 || entries[0].Name != "self" || entries[0].Type != "symlink" {
		t.Errorf("List dlink/self/self: got %+v, %v, want the symlink self itself", entries, err)
	}
	if res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"cat", "a.txt"}, Cwd: "dlink"}); err != nil || string(res.Stdout) != "inside" {
		t.Errorf("cat in dlink: got %q, %v, want %q, nil", res.Stdout, err, "inside")
	}
	// Writing onto a symlink replaces the link, not its target.
	if err := sb.WriteFile(ctx, "link", []byte("replaced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := sb.ReadFile(ctx, "d/a.txt", 100); string(got) != "inside" {
		t.Errorf("target after writing the link: got %q, want %q", got, "inside")
	}
}

func TestReadNonRegular(t *testing.T) {
	rt := newRuntime(t)
	sb, session := create(t, rt, nil)
	if err := syscall.Mkfifo(filepath.Join(rt.WorkspaceDir("t", session), "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := sb.ReadFile(t.Context(), "fifo", 100)
	wantCode(t, "ReadFile fifo", err, errcode.InvalidRequest)
	_, _, err = sb.ReadFile(t.Context(), ".", 100)
	wantCode(t, "ReadFile .", err, errcode.InvalidRequest)
	entries, err := sb.List(t.Context(), "fifo")
	if err != nil || len(entries) != 1 || entries[0].Type != "other" {
		t.Errorf("List fifo: got %+v, %v, want one entry of type other", entries, err)
	}
}

func TestMkdirParentsOverFile(t *testing.T) {
	sb, _ := create(t, newRuntime(t), nil)
	if err := sb.WriteFile(t.Context(), "f", nil, 0); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "Mkdir -p over a file", sb.Mkdir(t.Context(), "f", true), errcode.AlreadyExists)
	if err := sb.Mkdir(t.Context(), ".", true); err != nil {
		t.Errorf("Mkdir -p .: got %v, want nil", err)
	}
}

// Many commands running while the sandbox shuts down are all killed and
// waited for.
func TestShutdownKillsConcurrentExecs(t *testing.T) {
	sb, _ := create(t, newRuntime(t), nil)
	ctx := t.Context()
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", "echo > started" + strconv.Itoa(i) + "; sleep 100"}})
			errs <- err
		})
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < n; {
		if _, _, err := sb.ReadFile(ctx, "started"+strconv.Itoa(i), 10); err == nil {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("command %d did not start", i)
		}
		<-time.After(10 * time.Millisecond)
	}
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		wantCode(t, "Exec during Shutdown", err, errcode.InvalidState)
	}
}

func TestExecCancelled(t *testing.T) {
	sb, _ := create(t, newRuntime(t), nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", "echo > started; sleep 100"}})
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, _, err := sb.ReadFile(t.Context(), "started", 10); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("command did not start")
		}
		<-time.After(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Exec cancelled: got %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Exec did not return after cancel")
	}
}

// TestListPage pages through a directory: every entry once, in order,
// each page at most the limit, and a file lists itself on the first page.
func TestListPage(t *testing.T) {
	rt := newRuntime(t)
	sbi, session := create(t, rt, nil)
	sb := sbi.(*local.Sandbox)
	ctx := t.Context()
	dir := filepath.Join(rt.WorkspaceDir("t", session), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 25; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	after := ""
	for pages := 0; ; pages++ {
		page, more, err := sb.ListPage(ctx, "d", after, 10)
		if err != nil || len(page) > 10 || pages > 3 {
			t.Fatalf("page %d: %d entries, %v", pages, len(page), err)
		}
		for _, e := range page {
			names = append(names, e.Name)
		}
		if !more {
			break
		}
		after = page[len(page)-1].Name
	}
	if len(names) != 25 || names[0] != "f00" || names[24] != "f24" || !sort.StringsAreSorted(names) {
		t.Fatalf("names = %v, want f00..f24 in order", names)
	}
	page, more, err := sb.ListPage(ctx, "d/f03", "", 10)
	if err != nil || more || len(page) != 1 || page[0].Name != "f03" {
		t.Fatalf("a file's page = %+v %v %v, want itself", page, more, err)
	}
	if _, _, err := sb.ListPage(ctx, "../x", "", 10); errcode.Of(err) != errcode.InvalidPath {
		t.Fatalf("outside: got %v, want invalid_path", err)
	}
}

// TestLongLinkTarget: a symlink whose target holds a name over 255 bytes
// (the kernel's ENAMETOOLONG when it is followed) is invalid_path, not a
// retryable runtime_error.
func TestLongLinkTarget(t *testing.T) {
	sb, _ := create(t, newRuntime(t), nil)
	ctx := t.Context()
	if res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"ln", "-s", strings.Repeat("n", 300), "long"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("ln: %+v, %v", res, err)
	}
	_, _, err := sb.ReadFile(ctx, "long", 10)
	wantCode(t, "ReadFile long", err, errcode.InvalidPath)
	wantCode(t, "Mkdir -p long/x", sb.Mkdir(ctx, "long/x", true), errcode.InvalidPath)
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}, Cwd: "long"})
	wantCode(t, "Exec in long", err, errcode.InvalidPath)
}

// TestWireMessages: error messages (what crosses the wire) name workspace
// paths as the client gave them, never the sandbox's host directory.
func TestWireMessages(t *testing.T) {
	rt := newRuntime(t)
	sb, session := create(t, rt, nil)
	ctx := t.Context()
	ws := rt.WorkspaceDir("t", session)
	if res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", `ln -s a b && ln -s b a && ln -s "$PWD" abs && ln -s "` + strings.Repeat("n", 300) + `" long && mkdir d`}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("setup: %+v, %v", res, err)
	}
	var errs []error
	_, _, err := sb.ReadFile(ctx, "a/x", 10)
	errs = append(errs, err)
	_, _, err = sb.ReadFile(ctx, "abs/d", 10)
	errs = append(errs, err)
	_, _, err = sb.ReadFile(ctx, "long", 10)
	errs = append(errs, err)
	_, err = sb.List(ctx, "missing")
	errs = append(errs, err)
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}, Cwd: "abs"})
	errs = append(errs, err)
	errs = append(errs, sb.Mkdir(ctx, "d", false), sb.WriteFile(ctx, "d", nil, 0), sb.Remove(ctx, "a/x", false))
	_, err = rt.Create(ctx, runtime.Spec{Tenant: "t", SessionID: session})
	errs = append(errs, err)
	for i, err := range errs {
		var e *errcode.Error
		if !errors.As(err, &e) {
			t.Errorf("error %d: got %v, want an *errcode.Error", i, err)
			continue
		}
		if strings.Contains(e.Message, ws) || strings.Contains(e.Message, filepath.Dir(filepath.Dir(ws))) {
			t.Errorf("error %d: message %q names the host directory", i, e.Message)
		}
	}
}

// TestStagingLeavesNothing: after an aborted stage, a failed one and a
// commit (whose replaced workspace is removed in the background), nothing
// is left beside the workspace but the workspace.
func TestStagingLeavesNothing(t *testing.T) {
	rt := newRuntime(t)
	sbx, session := create(t, rt, nil)
	sb := sbx.(*local.Sandbox)
	ctx := t.Context()
	if err := sb.WriteFile(ctx, "ro/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := rt.WorkspaceDir("t", session)
	if err := os.Chmod(filepath.Join(ws, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{{Name: "frozen/", Typeflag: tar.TypeDir, Mode: 0o555}, {Name: "frozen/f", Typeflag: tar.TypeReg, Mode: 0o444, Size: 1}} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, abort, err := sb.StageWorkspace(ctx, bytes.NewReader(buf.Bytes()), archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	abort()
	if _, _, _, err := sb.StageWorkspace(ctx, bytes.NewReader(buf.Bytes()[:700]), archive.Limits{}); err == nil {
		t.Errorf("StageWorkspace of a truncated archive: got nil error")
	}
	if _, err := sb.ImportWorkspace(ctx, bytes.NewReader(buf.Bytes()), archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		des, err := os.ReadDir(filepath.Dir(ws))
		if err != nil {
			return err
		}
		if len(des) != 1 || des[0].Name() != "workspace" {
			var names []string
			for _, de := range des {
				names = append(names, de.Name())
			}
			return fmt.Errorf("beside the workspace: %q, want only workspace", names)
		}
		return nil
	})
}

// TestCreateReplacesLeftover: a session directory no sandbox of the
// runtime holds (the node that made it ended; local sandboxes do not
// outlive it) is replaced by a create of that session, as when a session
// lost with its node comes back to it; one a live sandbox holds is not.
func TestCreateReplacesLeftover(t *testing.T) {
	dir := t.TempDir()
	first, err := local.New(local.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	old, session := create(t, first, nil)
	if err := old.WriteFile(t.Context(), "stale.txt", []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The node restarted: a new runtime on the same directory.
	second, err := local.New(local.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := second.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: session, Epoch: 2})
	if err != nil {
		t.Fatalf("create over a leftover: %v", err)
	}
	t.Cleanup(func() { _ = sb.Shutdown(context.Background()) })
	if _, err := os.Stat(filepath.Join(second.WorkspaceDir("t", session), "stale.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the leftover's file is still there: %v", err)
	}
	_, err = second.Create(t.Context(), runtime.Spec{Tenant: "t", SessionID: session, Epoch: 3})
	wantCode(t, "Create over a live sandbox", err, errcode.AlreadyExists)
}
