package docker_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/testenv"
)

// TestPlantedSymlink: symlinks a command plants inside the container that
// lead out of the workspace are refused by every file operation, and
// nothing outside is touched.
func TestPlantedSymlink(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	sh(t, sb, "ln -s / esc && mkdir d && ln -s /etc d/e && ln -s ../../tmp up && ln -s /workspace/d inside")
	_, _, err := sb.ReadFile(ctx, "esc/etc/passwd", 1<<20)
	wantCode(t, "read through esc", err, errcode.InvalidPath)
	_, _, err = sb.ReadFile(ctx, "up", 1<<20)
	wantCode(t, "read a relative escape", err, errcode.InvalidPath)
	wantCode(t, "write through d/e", sb.WriteFile(ctx, "d/e/x", []byte("x"), 0o644), errcode.InvalidPath)
	wantCode(t, "write through up", sb.WriteFile(ctx, "up/x", []byte("x"), 0o644), errcode.InvalidPath)
	_, err = sb.List(ctx, "esc/etc")
	wantCode(t, "ls esc/etc", err, errcode.InvalidPath)
	_, err = sb.List(ctx, "d/e/passwd")
	wantCode(t, "ls d/e/passwd", err, errcode.InvalidPath)
	// The links themselves are listed, not followed.
	for _, p := range []string{"esc", "d/e"} {
		if entries, err := sb.List(ctx, p); err != nil || len(entries) != 1 || entries[0].Type != "symlink" {
			t.Errorf("ls %s: got %+v, %v, want the link itself", p, entries, err)
		}
	}
	wantCode(t, "rm through esc", sb.Remove(ctx, "esc/etc", true), errcode.InvalidPath)
	wantCode(t, "rm through d/e", sb.Remove(ctx, "d/e/passwd", false), errcode.InvalidPath)
	wantCode(t, "mkdir through esc", sb.Mkdir(ctx, "esc/new", true), errcode.InvalidPath)
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"pwd"}, Cwd: "d/e"})
	wantCode(t, "cwd through d/e", err, errcode.InvalidPath)
	// Nothing was made or removed outside the workspace.
	res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", "ls /etc/x /tmp/x /new 2>&1; ls /etc/passwd"}, User: "0"})
	if err != nil || strings.Count(string(res.Stdout), "No such file") != 3 || !strings.HasSuffix(string(res.Stdout), "/etc/passwd\n") {
		t.Fatalf("outside the workspace: %q, %v; want nothing made and /etc intact", res.Stdout, err)
	}
	// An absolute link is not followed even when it stays inside.
	wantCode(t, "write through an absolute link inside", sb.WriteFile(ctx, "inside/f", []byte("in"), 0o644), errcode.InvalidPath)
	// The links themselves live in the workspace: removing one is fine.
	if err := sb.Remove(ctx, "esc", false); err != nil {
		t.Fatalf("rm the link itself: %v", err)
	}
	if got := sh(t, sb, "ls -d / /etc >/dev/null && ls d"); got != "e\n" {
		t.Errorf("after the removals: d holds %q, want e only", got)
	}
}

// TestWriteOntoSymlink: writing onto a symlink replaces the link, not its
// target (as the local runtime's rename does), even a link leading out.
func TestWriteOntoSymlink(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	sh(t, sb, "echo target > a.txt && ln -s a.txt link && ln -s /etc/passwd pw")
	if err := sb.WriteFile(ctx, "link", []byte("replaced"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "pw", []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, sb, "cat a.txt link pw; [ -L link ] || echo nolink; head -c 5 /etc/passwd"); got != "target\nreplacedminenolink\nroot:" {
		t.Errorf("after writing the links: got %q", got)
	}
}

// TestListHostileNames: names with newlines, leading dashes, spaces, glob
// characters and forged stat lines are listed exactly, by the exec and by
// the archive (on a stopped sandbox) alike.
func TestListHostileNames(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	names := []string{
		"-rf", "a b", "new\nline", "81a4 3 1700000000", "x\n81a4 3 1700000000\n", "*", "?", "[a]",
		".hidden", "..dots", "...", "é", `back\slash`, "tab\there",
	}
	for _, n := range names {
		if err := sb.WriteFile(ctx, "d/"+n, []byte(n), 0o640); err != nil {
			t.Fatalf("WriteFile %q: %v", n, err)
		}
	}
	sh(t, sb, "mkdir d/sub && ln -s sub d/link && mkfifo d/fifo")
	want := append(slices.Clone(names), "sub", "link", "fifo")
	slices.Sort(want)
	check := func(what string) {
		t.Helper()
		entries, err := sb.List(ctx, "d")
		if err != nil {
			t.Fatalf("%s: List: %v", what, err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name)
			wantType, wantSize, wantMode := "file", int64(len(e.Name)), uint32(0o640)
			switch e.Name {
			case "sub", "link", "fifo":
				wantType = map[string]string{"sub": "dir", "link": "symlink", "fifo": "other"}[e.Name]
				wantSize, wantMode = e.Size, e.Mode
			}
			if e.Type != wantType || e.Size != wantSize || e.Mode != wantMode || time.Since(e.ModTime) > time.Hour {
				t.Errorf("%s: entry %+v, want type %s size %d mode %o and a recent mtime", what, e, wantType, wantSize, wantMode)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: got names %q, want %q", what, got, want)
		}
	}
	check("running")
	if _, ok, err := sb.ListByExec(ctx, "d"); !ok || err != nil {
		t.Errorf("the running sandbox's listing fell back to the archive (%v)", err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	check("stopped")
}

// TestStoppedSandbox: file operations work on a stopped sandbox; exec is
// invalid_state.
func TestStoppedSandbox(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	if err := sb.WriteFile(ctx, "keep", []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "dir/f", []byte("stopped"), 0); err != nil {
		t.Fatalf("WriteFile while stopped: %v", err)
	}
	if got, mode, err := sb.ReadFile(ctx, "dir/f", 100); err != nil || string(got) != "stopped" || mode != 0o644 {
		t.Errorf("ReadFile while stopped: got %q mode %o, %v", got, mode, err)
	}
	if err := sb.Mkdir(ctx, "m", false); err != nil {
		t.Errorf("Mkdir while stopped: %v", err)
	}
	entries, err := sb.List(ctx, ".")
	if err != nil || len(entries) != 3 {
		t.Errorf("List while stopped: got %+v, %v, want dir, keep, m", entries, err)
	}
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}})
	wantCode(t, "Exec while stopped", err, errcode.InvalidState)
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}, Cwd: "missing"})
	wantCode(t, "Exec in a missing cwd while stopped", err, errcode.InvalidState)
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, sb, "cat dir/f; stat -c %u dir/f dir"); got != "stopped65534\n65534\n" {
		t.Errorf("after Start: got %q, want the file owned by the sandbox user", got)
	}
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, err = sb.ReadFile(ctx, "keep", 10)
	wantCode(t, "ReadFile after Shutdown", err, errcode.InvalidState)
	_, err = sb.List(ctx, ".")
	wantCode(t, "List after Shutdown", err, errcode.InvalidState)
	wantCode(t, "Stop after Shutdown", sb.Stop(ctx), errcode.InvalidState)
}

// TestFindSandboxes: the runtime finds its node's containers by label,
// with their session, epoch, environment and state, and nobody else's.
func TestFindSandboxes(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	rt := newRuntime(t)
	a := spec(rt, image)
	a.Env = map[string]string{"K": "v", "SECRET": "x=y"}
	a.Epoch = 7
	create(t, rt, a)
	b := spec(rt, image)
	sbb := create(t, rt, b)
	if err := sbb.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	other := newRuntime(t)
	create(t, other, spec(other, image))
	// A container of this node with malformed labels is skipped.
	cli := testenv.DockerClient(t)
	testenv.StartLabelledContainer(t, cli, image, map[string]string{"paddock.node": rt.Node(), "paddock.epoch": "x"})

	found, err := rt.FindSandboxes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]runtime.Found{}
	for _, fd := range found {
		got[fd.SessionID] = fd
	}
	fa, fb := got[a.SessionID], got[b.SessionID]
	if len(found) != 2 || fa.Tenant != "t" || fa.Epoch != 7 || fa.Env["K"] != "v" || fa.Env["SECRET"] != "x=y" || !fa.Running || fb.Running || fb.Epoch != 1 {
		t.Fatalf("found %+v, want a (epoch 7, env, running) and b (stopped)", found)
	}
	if time.Since(fa.Created) > time.Hour || time.Until(fa.Created) > time.Minute {
		t.Errorf("created = %v, want about now", fa.Created)
	}
	if got := sh(t, fa.Sandbox, "echo $K; id -u"); got != "v\n65534\n" {
		t.Errorf("exec through the found sandbox: got %q", got)
	}
	if err := fb.Sandbox.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := fb.Sandbox.WriteFile(t.Context(), "f", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, fb.Sandbox, "stat -c '%u %a' f"); got != "65534 600\n" {
		t.Errorf("file written through the found sandbox: got %q", got)
	}
	// Reaping through a found sandbox removes the container.
	if err := fa.Sandbox.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if running, err := fa.Sandbox.Running(t.Context()); running || err != nil {
		t.Errorf("Running after Shutdown: %v, %v", running, err)
	}
}

// TestStoppedSymlinks: a stopped sandbox's file operations apply the same
// symlink rule (they resolve through the archive endpoints), and a link
// that loops is listed from its directory's archive.
func TestStoppedSymlinks(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	sh(t, sb, `mkdir data && echo in > data/f && ln -s "$PWD/data" abs && ln -s data rel && ln -s a b && ln -s b a`)
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _, err := sb.ReadFile(ctx, "rel/f", 10); err != nil || string(got) != "in\n" {
		t.Errorf("ReadFile rel/f: got %q, %v, want %q", got, err, "in\n")
	}
	_, _, err := sb.ReadFile(ctx, "abs/f", 10)
	wantCode(t, "ReadFile abs/f", err, errcode.InvalidPath)
	_, _, err = sb.ReadFile(ctx, "a/f", 10)
	wantCode(t, "ReadFile a/f", err, errcode.InvalidPath)
	wantCode(t, "WriteFile abs/g", sb.WriteFile(ctx, "abs/g", []byte("x"), 0o644), errcode.InvalidPath)
	for _, p := range []string{"a", "abs", "rel"} {
		entries, err := sb.List(ctx, p)
		if err != nil || len(entries) != 1 || entries[0].Name != p || entries[0].Type != "symlink" {
			t.Errorf("List %s while stopped: got %+v, %v, want the link itself", p, entries, err)
		}
	}
}

// TestWireMessages: what crosses the wire (an *errcode.Error's Message)
// names workspace paths as the client gave them, never the daemon's text
// (which names host paths) nor a command's stderr; both stay in the cause.
func TestWireMessages(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	sh(t, sb, "ln -s a b && ln -s b a && mkdir ro && echo x > ro/f && chmod 0555 ro")
	_, _, loopErr := sb.ReadFile(ctx, "a/f", 10)
	rmErr := sb.Remove(ctx, "ro", true)
	_, pullErr := newRuntime(t).Create(ctx, runtime.Spec{Tenant: "t", SessionID: "s", Epoch: 1, Image: "paddock/does-not-exist:nope"})
	for _, tc := range []struct {
		what string
		err  error
		code errcode.Code
		want string
	}{
		{"read through a loop", loopErr, errcode.InvalidPath, "a/f"},
		{"rm of a tree the user cannot empty", rmErr, errcode.RuntimeError, "rm ro failed"},
		{"create from a missing image", pullErr, errcode.ImageNotFound, "paddock/does-not-exist:nope"},
	} {
		var e *errcode.Error
		if !errors.As(tc.err, &e) || e.Code != tc.code {
			t.Errorf("%s: got %v, want code %s", tc.what, tc.err, tc.code)
			continue
		}
		if !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: message %q does not name %q", tc.what, e.Message, tc.want)
		}
		for _, bad := range []string{"daemon", "/var/lib/docker", "overlay", "ermission denied", "/workspace/", "Error"} {
			if strings.Contains(e.Message, bad) {
				t.Errorf("%s: message %q holds %q", tc.what, e.Message, bad)
			}
		}
		if e.Err == nil {
			t.Errorf("%s: no cause kept for the logs", tc.what)
		}
	}
}
