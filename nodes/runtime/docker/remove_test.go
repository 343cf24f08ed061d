package docker_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/testenv"
)

// wantRunning fails the test unless the container's state, as the engine
// reports it, is want.
func wantRunning(t *testing.T, sb runtime.Sandbox, id string, what string, want bool) {
	t.Helper()
	c, err := testenv.DockerClient(t).ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatalf("%s: inspect: %v", what, err)
	}
	if got := c.State != nil && c.State.Running; got != want {
		t.Errorf("%s: container running = %v, want %v", what, got, want)
	}
	if got, err := sb.Running(t.Context()); err != nil || got != want {
		t.Errorf("%s: Running = %v, %v, want %v, nil", what, got, err, want)
	}
}

// TestRemoveStopped: rm works on a stopped sandbox, for a file, a symlink
// and a tree, and leaves the container stopped.
func TestRemoveStopped(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	sh(t, sb, "mkdir -p tree/a/b keep && echo x > tree/a/b/f && echo y > file && ln -s keep link && echo k > keep/k")
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Remove(ctx, "file", false); err != nil {
		t.Fatalf("Remove file while stopped: %v", err)
	}
	wantRunning(t, sb, sb.ID(), "after removing a file", false)
	if err := sb.Remove(ctx, "tree", true); err != nil {
		t.Fatalf("Remove -r tree while stopped: %v", err)
	}
	if err := sb.Remove(ctx, "link", false); err != nil {
		t.Fatalf("Remove link while stopped: %v", err)
	}
	wantRunning(t, sb, sb.ID(), "after removing a tree", false)
	// Failures are what they are on a running sandbox, and leave it stopped.
	wantCode(t, "Remove missing", sb.Remove(ctx, "missing", false), errcode.NotFound)
	wantCode(t, "Remove keep without recursive", sb.Remove(ctx, "keep", false), errcode.InvalidRequest)
	wantRunning(t, sb, sb.ID(), "after the failed removals", false)
	_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}})
	wantCode(t, "Exec after the removals", err, errcode.InvalidState)

	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, sb, "ls -A; cat keep/k"); got != "keep\nk\n" {
		t.Errorf("after Start: got %q, want only keep and its file", got)
	}
	// On a running sandbox it stays running.
	if err := sb.Remove(ctx, "keep", true); err != nil {
		t.Fatal(err)
	}
	wantRunning(t, sb, sb.ID(), "after a removal while running", true)
}

// TestRemoveStoppedRaces: a Start and execs that arrive while rm has
// started a stopped container for itself wait for it: no exec runs in the
// container the rm borrowed, and the Start is not undone by the rm stopping
// the container again.
func TestRemoveStoppedRaces(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	cli := testenv.DockerClient(t)
	// A tree large enough that the rm keeps the container running for a
	// while (rm -rf of 3,000 files takes about 0.75 s on this fuse-overlayfs).
	sh(t, sb, "mkdir tree && cd tree && seq 1 3000 | xargs touch")
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var rmErr error
	rmDone := make(chan struct{})
	go func() {
		defer close(rmDone)
		rmErr = sb.Remove(ctx, "tree", true)
	}()
	var wg sync.WaitGroup
	ran := make(chan string, 100)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-rmDone:
					return
				default:
				}
				// Stop issued below ends these too: only a success counts.
				if res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", "echo ran >> ran"}}); err == nil {
					ran <- fmt.Sprintf("exit %d", res.ExitCode)
					return
				}
			}
		})
	}
	// Once the container runs for the rm, a Start arrives.
	testenv.Eventually(t, time.Minute, func() error {
		c, err := cli.ContainerInspect(ctx, sb.ID())
		if err != nil {
			return err
		}
		if c.State == nil || !c.State.Running {
			return errors.New("not running yet")
		}
		return nil
	})
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("Start during the rm: %v", err)
	}
	<-rmDone
	wg.Wait()
	close(ran)
	if rmErr != nil {
		t.Fatalf("Remove: %v", rmErr)
	}
	for r := range ran {
		t.Errorf("an exec ran while the sandbox was stopped (%s)", r)
	}
	wantRunning(t, sb, sb.ID(), "after a Start that came during the rm", true)
	if got := sh(t, sb, "ls -A"); got != "" {
		t.Errorf("workspace after the rm: got %q, want it empty", got)
	}
}
