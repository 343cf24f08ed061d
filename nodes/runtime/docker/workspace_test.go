package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/runtimetest"
	"github.com/paddock-dev/paddock/testenv"
)

// entry is one member of a workspace archive, as compared here.
type entry = runtimetest.TarMember

// members reads a tar into its members by clean name.
func members(t *testing.T, data []byte) map[string]entry { return runtimetest.TarMembers(t, data) }

// seedArchive is the archive the hydrate tests restore (the contract
// suite's).
func seedArchive(t *testing.T) []byte { return runtimetest.SeedArchive(t) }

// wantWorkspace fails the test unless sb's workspace holds exactly the
// members of want (names, types, permission bits, contents, link targets),
// every one owned by uid.
func wantWorkspace(t *testing.T, sb runtime.Sandbox, want []byte, uid string) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := sb.ExportWorkspace(t.Context(), &buf, nil); err != nil {
		t.Fatalf("ExportWorkspace: %v", err)
	}
	got, exp := members(t, buf.Bytes()), members(t, want)
	for name, e := range exp {
		if g, ok := got[name]; !ok || g != e {
			t.Errorf("workspace member %s: got %+v (present %v), want %+v", name, g, ok, e)
		}
	}
	for name := range got {
		if _, ok := exp[name]; !ok {
			t.Errorf("workspace member %s: present, want it gone", name)
		}
	}
	if got := sh(t, sb, "find . -exec stat -c %u {} + | sort -u"); got != uid+"\n" {
		t.Errorf("owners in the workspace: got %q, want only %s", got, uid)
	}
}

// besideRoot returns what hydrates left in the holder directory beside
// the workspace root (in parent): staging directories and replaced trees.
func besideRoot(t *testing.T, sb runtime.Sandbox, parent string) string {
	t.Helper()
	res, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", "ls -A " + parent + "/.paddock 2>/dev/null || true"}})
	if err != nil {
		t.Fatalf("ls %s/.paddock: %v", parent, err)
	}
	return string(res.Stdout)
}

// noneBeside waits until nothing of a hydrate is left beside the root.
func noneBeside(t *testing.T, sb runtime.Sandbox, parent string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() error {
		if left := besideRoot(t, sb, parent); left != "" {
			return fmt.Errorf("left beside the workspace root: %q", left)
		}
		return nil
	})
}

// TestHydrateReadOnlyTree: a workspace holding a tree its own user cannot
// empty (a directory made 0555 with a file inside, as a command may leave
// it) is replaced all or nothing: the workspace ends exactly equal to the
// archive, and the old tree is then removed from beside it. As root (a
// spec may ask for uid 0, still without capabilities) too.
func TestHydrateReadOnlyTree(t *testing.T) {
	rt := newRuntime(t)
	image := testenv.SandboxBaseImage(t)
	for _, user := range []string{"", "0"} {
		t.Run("user="+user, func(t *testing.T) {
			s := spec(rt, image)
			s.User = user
			sb := create(t, rt, s)
			sh(t, sb, "mkdir -p ro/sub && echo x > ro/sub/f && echo y > ro/f && chmod 0555 ro/sub ro && echo keep > top")
			seed := seedArchive(t)
			st, err := sb.ImportWorkspace(t.Context(), bytes.NewReader(seed), archive.Limits{})
			if err != nil {
				t.Fatalf("ImportWorkspace: %v", err)
			}
			if st.Members != 7 {
				t.Errorf("stats: got %+v, want 7 members", st)
			}
			uid := map[string]string{"": "65534", "0": "0"}[user]
			wantWorkspace(t, sb, seed, uid)
			noneBeside(t, sb, "/")
			// And again, over a workspace that now holds a 0555 directory
			// from the archive itself.
			if _, err := sb.ImportWorkspace(t.Context(), bytes.NewReader(seed), archive.Limits{}); err != nil {
				t.Fatalf("second ImportWorkspace: %v", err)
			}
			wantWorkspace(t, sb, seed, uid)
			noneBeside(t, sb, "/")
		})
	}
}

// TestStageAbort: an aborted stage, a hostile archive and an archive that
// breaks off leave the workspace untouched and no staging directory; a
// stage is committed or aborted once.
func TestStageAbort(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	sh(t, sb, "mkdir -p keep/d && echo k > keep/d/f && chmod 0555 keep/d")
	before := exported(t, sb)
	seed := seedArchive(t)

	_, commit, abort, err := sb.StageWorkspace(ctx, bytes.NewReader(seed), archive.Limits{})
	if err != nil {
		t.Fatalf("StageWorkspace: %v", err)
	}
	if left := besideRoot(t, sb, "/"); !strings.HasPrefix(left, "staging-") {
		t.Errorf("beside the root after staging: got %q, want the staging directory", left)
	}
	abort()
	if left := besideRoot(t, sb, "/"); left != "" {
		t.Errorf("beside the root after abort: got %q, want nothing", left)
	}
	if err := commit(); err == nil {
		t.Errorf("commit after abort: got nil, want an error")
	}
	if got := exported(t, sb); !bytes.Equal(got, before) {
		t.Errorf("workspace after an aborted stage differs from before")
	}

	hostile := append(bytes.Clone(seed[:len(seed)-1024]), tarMember(t, "../evil", "x")...)
	_, _, _, err = sb.StageWorkspace(ctx, bytes.NewReader(hostile), archive.Limits{})
	wantCode(t, "StageWorkspace of a hostile archive", err, errcode.InvalidArchive)
	_, _, _, err = sb.StageWorkspace(ctx, io.MultiReader(bytes.NewReader(seed[:1500]), failingReader{}), archive.Limits{})
	if err == nil {
		t.Errorf("StageWorkspace of an archive that breaks off: got nil error")
	}
	if left := besideRoot(t, sb, "/"); left != "" {
		t.Errorf("beside the root after failed stages: got %q, want nothing", left)
	}
	if got := exported(t, sb); !bytes.Equal(got, before) {
		t.Errorf("workspace after failed stages differs from before")
	}

	_, commit, abort, err = sb.StageWorkspace(ctx, bytes.NewReader(seed), archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	abort() // after commit: nothing
	wantWorkspace(t, sb, seed, "65534")
	noneBeside(t, sb, "/")
}

// exported returns the workspace's archive.
func exported(t *testing.T, sb runtime.Sandbox) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := sb.ExportWorkspace(t.Context(), &buf, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tarMember is a tar of one regular member, with its end marker.
func tarMember(t *testing.T, name, data string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// failingReader fails every read, as a download that breaks off does.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// TestHydrateUnderRunningProcess: a command whose cwd is in the workspace
// keeps running through the swap; what it writes afterwards lands in the
// old tree (or nowhere, once that is removed), never in the new workspace,
// and the sandbox goes on serving.
func TestHydrateUnderRunningProcess(t *testing.T) {
	sb := sandbox(t)
	ctx := t.Context()
	sh(t, sb, "mkdir sub")
	type outcome struct {
		res runtime.ExecResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := sb.Exec(ctx, runtime.ExecSpec{
			Argv: []string{"sh", "-c", "echo > started; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo late > late.txt; echo wrote"},
			Cwd:  "sub", Timeout: time.Minute,
		})
		done <- outcome{res, err}
	}()
	testenv.Eventually(t, 30*time.Second, func() error {
		_, _, err := sb.ReadFile(ctx, "sub/started", 10)
		return err
	})
	seed := seedArchive(t)
	if _, err := sb.ImportWorkspace(ctx, bytes.NewReader(seed), archive.Limits{}); err != nil {
		t.Fatalf("ImportWorkspace under a running command: %v", err)
	}
	sh(t, sb, "touch /tmp/go")
	select {
	case o := <-done:
		if o.err != nil {
			t.Errorf("the command in the old workspace: got error %v, want a result", o.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the command in the old workspace did not end")
	}
	wantWorkspace(t, sb, seed, "65534")
	if got := sh(t, sb, "echo alive; ls"); got != "alive\nempty\nfrozen\nlink\nsrc\n" {
		t.Errorf("after the hydrate: got %q", got)
	}
	noneBeside(t, sb, "/")
}

// TestHydrateDeepRoot: a workspace root below a parent the daemon made
// (owned by uid 0) is hydrated the same way, and its holder directory is
// the sandbox user's.
func TestHydrateDeepRoot(t *testing.T) {
	rt := newRuntime(t)
	s := spec(rt, testenv.SandboxBaseImage(t))
	s.WorkspaceRoot = "/home/paddock/work"
	sb := create(t, rt, s)
	sh(t, sb, "mkdir -p ro/d && echo x > ro/d/f && chmod 0555 ro/d ro")
	seed := seedArchive(t)
	if _, err := sb.ImportWorkspace(t.Context(), bytes.NewReader(seed), archive.Limits{}); err != nil {
		t.Fatalf("ImportWorkspace: %v", err)
	}
	wantWorkspace(t, sb, seed, "65534")
	noneBeside(t, sb, "/home/paddock")
	if got := sh(t, sb, "stat -c %u /home/paddock /home/paddock/.paddock"); got != "0\n65534\n" {
		t.Errorf("owners of the parent and the holder: got %q, want 0 and 65534", got)
	}
}

// copyIn extracts one header (a directory) into the container at dir, as
// the daemon does, owners included.
func copyIn(t *testing.T, sb *docker.Sandbox, dir string, h tar.Header) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&h); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := testenv.DockerClient(t).CopyToContainer(t.Context(), sb.ID(), dir, &buf, container.CopyToContainerOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestHydrateCannotMove: an entry the sandbox user may not move (a
// directory of uid 0's at the top of the workspace: its ".." cannot be
// rewritten) fails the hydrate with the workspace as it was, the entries
// moved before it moved back, modes included. This is the swap by exec
// (no loopfs disk: on one the node swaps as root, and such an entry
// moves). A hydrate gives such a directory to the user and commits again
// (TestHydrateUnmovableEntries): that is turned off here, to reach the
// rollback.
func TestHydrateCannotMove(t *testing.T) {
	defer docker.SetReown(false)()
	rt := newRuntimeWith(t, docker.Config{DiskMechanism: runtime.DiskNone})
	sb := create(t, rt, spec(rt, testenv.SandboxBaseImage(t)))
	sh(t, sb, "mkdir -p a/ro && echo x > a/ro/f && chmod 0555 a/ro a && echo b > b")
	copyIn(t, sb, "/workspace", tar.Header{Name: "zz-root/", Typeflag: tar.TypeDir, Mode: 0o755})
	before := exported(t, sb)
	_, err := sb.ImportWorkspace(t.Context(), bytes.NewReader(seedArchive(t)), archive.Limits{})
	wantCode(t, "ImportWorkspace", err, errcode.RuntimeError)
	if got := exported(t, sb); !bytes.Equal(got, before) {
		t.Errorf("workspace after the failed hydrate differs from before:\n got %v\nwant %v", members(t, got), members(t, before))
	}
	noneBeside(t, sb, "/")
}

// TestHydrateShutdownWaits: Shutdown right after a hydrate ends the
// background removal of the old tree and waits for it (the race detector
// and the leftover check see to the rest).
func TestHydrateShutdownWaits(t *testing.T) {
	rt := newRuntime(t)
	sbx, err := rt.Create(t.Context(), spec(rt, testenv.SandboxBaseImage(t)))
	if err != nil {
		t.Fatal(err)
	}
	sb := sbx.(*docker.Sandbox)
	sh(t, sb, "mkdir big && cd big && seq 1 500 | xargs touch")
	if _, err := sb.ImportWorkspace(t.Context(), bytes.NewReader(seedArchive(t)), archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if running, err := sb.Running(ctx); running || err != nil {
		t.Errorf("after Shutdown: running %v, %v", running, err)
	}
}
