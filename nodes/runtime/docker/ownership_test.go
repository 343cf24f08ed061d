package docker_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/testenv"
)

// notOwned returns the entries of sb's workspace that its user (uid) does
// not own.
func notOwned(t *testing.T, sb runtime.Sandbox, uid string) string {
	t.Helper()
	return sh(t, sb, "find /workspace ! -user "+uid)
}

// TestFallbackRenameRace is the attack: the sandbox renames a directory
// without write permission (0555: the supervisor's writes into it are
// refused, so the node makes them through the Docker API) back and forth
// while the node writes and makes directories in it. Nothing in the
// workspace may end up owned by anyone but the sandbox's user (the daemon
// re-made a directory that had just been renamed away, as root, and every
// hydrate after failed on it), no write may fail on a directory that moved
// while the daemon extracted, and the workspace still persists and
// hydrates. Before the freeze, 4 runs in 4 failed (root-owned d, or the
// daemon's "no such file or directory" half way).
func TestFallbackRenameRace(t *testing.T) {
	rt := supervisedRuntime(t)
	sb := create(t, rt, spec(rt, testenv.SandboxBaseImage(t)))
	ctx := t.Context()
	uid := strings.TrimSpace(sh(t, sb, "id -u"))
	sh(t, sb, "mkdir d && echo 0 > d/f && chmod 555 d")
	p, err := sb.StartProcess(ctx, runtime.ProcessSpec{Argv: []string{"sh", "-c",
		// d is away about half the time. A write that finds it away makes
		// a new d (the supervisor makes missing parents): the loop removes
		// that one to go on. Bounded: 3,000 rounds at most.
		`i=0; while [ $i -lt 3000 ] && [ ! -e stop ]; do mv d x 2>/dev/null; mv x d 2>/dev/null || { rm -rf d 2>/dev/null; mv x d 2>/dev/null; }; i=$((i+1)); done`}})
	if err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	defer p.Close()
	written := 0
	for i := 0; i < 120; i++ {
		// d is there (0555: the write goes through the Docker API), or
		// away and the write is not_found or makes a new d; or d comes
		// back while the write makes it (already_exists: the loop won the
		// race, and a typed refusal is the answer).
		switch err := sb.WriteFile(ctx, "d/f", []byte(fmt.Sprint(i)), 0o644); errcode.Of(err) {
		case "":
			written++
		case errcode.NotFound, errcode.AlreadyExists:
		default:
			t.Fatalf("WriteFile d/f: %v", err)
		}
		if i%8 != 0 {
			continue
		}
		if err := sb.Mkdir(ctx, fmt.Sprintf("d/sub%d", i), false); err != nil && errcode.Of(err) != errcode.NotFound {
			t.Fatalf("Mkdir d/sub%d: %v", i, err)
		}
	}
	sh(t, sb, "touch stop")
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		t.Fatalf("the renaming loop: exit %d, %v", code, err)
	}
	if written == 0 {
		t.Fatal("no write went through: the attack was not exercised")
	}
	if got := notOwned(t, sb, uid); got != "" {
		t.Errorf("entries the sandbox's user does not own:\n%s", got)
	}
	var snap bytes.Buffer
	if _, err := sb.ExportWorkspace(ctx, &snap, nil); err != nil {
		t.Fatalf("ExportWorkspace: %v", err)
	}
	if _, err := sb.ImportWorkspace(ctx, bytes.NewReader(snap.Bytes()), archive.DefaultLimits()); err != nil {
		t.Fatalf("ImportWorkspace of its own snapshot: %v", err)
	}
	wantWorkspace(t, sb, snap.Bytes(), uid)
}

// TestHydrateUnmovableEntries: a workspace holding what the sandbox's user
// cannot move as it is (a directory owned by root, as the Docker API left
// them before, one with a root-owned directory inside, and the user's own
// directories without write permission) still hydrates, and afterwards
// holds only the archive's members, all the user's; so does one after an
// archive that leaves its directories out.
func TestHydrateUnmovableEntries(t *testing.T) {
	rt := supervisedRuntime(t)
	sb := create(t, rt, spec(rt, testenv.SandboxBaseImage(t)))
	ctx := t.Context()
	uid := strings.TrimSpace(sh(t, sb, "id -u"))
	sh(t, sb, "mkdir -p ro/inner && echo x > ro/inner/f && chmod 555 ro/inner ro")
	var planted bytes.Buffer
	tw := tar.NewWriter(&planted)
	for _, name := range []string{"rootdir/", "rootdir/deep/", "rootdir2/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	cli := testenv.DockerClient(t)
	if err := cli.CopyToContainer(ctx, sb.ContainerID(), "/workspace", io.NopCloser(&planted), container.CopyToContainerOptions{}); err != nil {
		t.Fatalf("plant root-owned directories: %v", err)
	}
	if got := notOwned(t, sb, uid); !strings.Contains(got, "/workspace/rootdir\n") {
		t.Fatalf("the planted directories are not root's: %q", got)
	}
	seed := seedArchive(t)
	if _, err := sb.ImportWorkspace(ctx, bytes.NewReader(seed), archive.DefaultLimits()); err != nil {
		t.Fatalf("ImportWorkspace: %v", err)
	}
	wantWorkspace(t, sb, seed, uid)

	// An archive that leaves out its directories gets them made by the
	// daemon unless it is given them: they must be the user's too.
	var sparse bytes.Buffer
	tw = tar.NewWriter(&sparse)
	for _, name := range []string{"top/mid/f", "top/g"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: 1, ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.ImportWorkspace(ctx, bytes.NewReader(sparse.Bytes()), archive.DefaultLimits()); err != nil {
		t.Fatalf("ImportWorkspace of an archive without its directories: %v", err)
	}
	if got := notOwned(t, sb, uid); got != "" {
		t.Errorf("after the archive without its directories, entries the sandbox's user does not own:\n%s", got)
	}
	if got := sh(t, sb, "cat top/mid/f top/g"); got != "xx" {
		t.Errorf("contents: got %q, want %q", got, "xx")
	}
	// The replaced trees, root-owned directory inside included, is removed.
	testenv.Eventually(t, time.Minute, func() error {
		if left := sh(t, sb, "ls -A /.paddock | grep -E '^(staging|old)-' || true"); left != "" {
			return fmt.Errorf("left beside the workspace root: %q", left)
		}
		return nil
	})
}

// TestStartThawsPaused: a sandbox left paused (a node that died in the
// middle of a freeze) runs again on Start.
func TestStartThawsPaused(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	if err := testenv.DockerClient(t).ContainerPause(ctx, sb.ContainerID()); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if running, err := sb.Running(ctx); err != nil || running {
		t.Fatalf("Running while paused: %v, %v; want false", running, err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("Start of a paused sandbox: %v", err)
	}
	if running, err := sb.Running(ctx); err != nil || !running {
		t.Errorf("Running after Start: %v, %v; want true", running, err)
	}
	sh(t, sb, "true")
}

// TestFrozenLargeWrite: a write through the Docker API below the workspace
// root larger than what is read before the freeze (the rest streams
// frozen) arrives whole, owned by the sandbox's user, and the sandbox runs
// after; a content that ends early is refused before anything is frozen.
func TestFrozenLargeWrite(t *testing.T) {
	sb := sandbox(t) // no supervisor: every write goes through the Docker API
	ctx := t.Context()
	uid := strings.TrimSpace(sh(t, sb, "id -u"))
	if err := sb.Mkdir(ctx, "d", false); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), (17<<20)/16) // past the 16 MiB read before the freeze
	if err := sb.WriteFile(ctx, "d/big", data, 0o600); err != nil {
		t.Fatalf("WriteFile d/big: %v", err)
	}
	if running, err := sb.Running(ctx); err != nil || !running {
		t.Fatalf("Running after the write: %v, %v; want true (thawed)", running, err)
	}
	if st := sh(t, sb, "stat -c %u:%a d/big"); st != uid+":600\n" {
		t.Errorf("d/big: owner and mode %q, want %s:600", st, uid)
	}
	got, mode, err := sb.ReadFile(ctx, "d/big", 32<<20)
	if err != nil || !bytes.Equal(got, data) || mode != 0o600 {
		t.Errorf("ReadFile d/big: %d bytes (equal %v), mode %v, %v; want the %d written, 0600", len(got), bytes.Equal(got, data), mode, err, len(data))
	}
	if got := notOwned(t, sb, uid); got != "" {
		t.Errorf("entries the sandbox's user does not own:\n%s", got)
	}
	err = sb.WriteFileFrom(ctx, "d/short", strings.NewReader("abc"), 10, 0o644)
	wantCode(t, "WriteFileFrom of a short content", err, errcode.InvalidRequest)
	if running, err := sb.Running(ctx); err != nil || !running {
		t.Errorf("Running after the short write: %v, %v; want true", running, err)
	}
}
