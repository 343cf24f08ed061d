package local_test

import (
	"bytes"
	"context"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/testenv"
)

// TestWatcherLifecycle: the watcher starts at the first exec that asks
// for changes, not before; it follows a workspace swapped by a restore;
// it stops with Stop and with Shutdown, leaving no goroutine behind.
func TestWatcherLifecycle(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	before := goruntime.NumGoroutine()
	sb, err := newRuntime(t).Create(ctx, runtime.Spec{Tenant: "t", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	ls := sb.(*local.Sandbox)
	exec := func(script string, changes bool) runtime.ExecResult {
		t.Helper()
		res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"/bin/sh", "-c", script}, Changes: changes})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := exec(": > a", false); res.Changes != nil || ls.Watching() {
		t.Fatalf("an exec that did not ask got changes %+v (watching %v)", res.Changes, ls.Watching())
	}
	if res := exec(": > b", true); res.Changes == nil || res.Changes.Created != 1 || !ls.Watching() {
		t.Fatalf("got changes %+v (watching %v), want +1", res.Changes, ls.Watching())
	}
	// A restore swaps the workspace directory: the next exec watches the
	// new one.
	var tarball bytes.Buffer
	if _, err := sb.ExportWorkspace(ctx, &tarball, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.ImportWorkspace(ctx, &tarball, archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	if res := exec("rm a; : > c", true); res.Changes == nil || res.Changes.Created != 1 || res.Changes.Removed != 1 || res.Changes.Truncated {
		t.Fatalf("after a restore: got %+v, want +1 -1", res.Changes)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if ls.Watching() {
		t.Fatal("the watcher runs on after Stop")
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	exec(": > d", true)
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ls.Watching() {
		t.Fatal("the watcher runs on after Shutdown")
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := goruntime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines, want at most %d", n, before)
		}
		return nil
	})
}

// TestProcessChanges: a process that asked reports what it changed once
// it has exited, and nothing before.
func TestProcessChanges(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	sb, err := newRuntime(t).Create(ctx, runtime.Spec{Tenant: "t", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Shutdown(context.Background()) })
	p, err := sb.(runtime.Processes).StartProcess(ctx, runtime.ProcessSpec{Argv: []string{"/bin/sh", "-c", "read x; printf abc > out"}, Changes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pc := p.(runtime.ProcessChanges)
	if c := pc.Changes(); c != nil {
		t.Fatalf("changes before the exit: %+v", c)
	}
	if _, err := p.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c := pc.Changes()
	if c == nil || c.Created != 1 || c.BytesWritten != 3 || len(c.Paths) != 1 || !strings.HasSuffix(c.Paths[0].Path, "out") {
		t.Fatalf("got %+v, want out created with 3 bytes", c)
	}
}
