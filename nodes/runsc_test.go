package nodes_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/nodes/runtime/runsc"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/retention"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

// TestRunscNode: a node serving the runsc runtime (agent-node --runtime
// runsc) advertises it, so that the scheduler places a create asking for
// runsc on it and refuses one asking for docker; the session runs on
// gVisor's kernel and its files round-trip through the node.
func TestRunscNode(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "runsc-" + uuid.NewString()[:8]
	rt := testenv.RunscRuntime(t, t.TempDir(), node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 3*time.Minute)
	startAgent(t, st, nodes.Config{ID: node}, rt)

	if _, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image}); !errors.Is(err, errcode.ErrNoCapacity) {
		t.Errorf("create on docker with only a runsc node: %v; want no_capacity", err)
	}
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: runsc.Name, Image: image})
	if err != nil {
		t.Fatal(err)
	}
	if s.Runtime != runsc.Name || s.Node != node {
		t.Errorf("create = %+v; want runtime runsc on %s", s, node)
	}
	res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "uname -r; echo hi > notes.txt"})
	if err != nil || strings.TrimSpace(res.Stdout) != "4.4.0" {
		t.Fatalf("uname -r = %q, %v; want gVisor's 4.4.0", res.Stdout, err)
	}
	if got, err := st.Client.ReadFile(ctx, s.SessionID, "notes.txt"); err != nil || string(got) != "hi\n" {
		t.Errorf("notes.txt = %q, %v", got, err)
	}
	if err := st.Client.Delete(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
}

// TestRunscNodeReattach: a node on runsc that stops (its sandboxes run
// on) and starts again with the same id and a new runtime on the same
// directory (a restarted process) serves its running session again: the
// counter the session left in memory still counts, its secret is still
// redacted; and the session's shutdown then leaves no sandbox directory.
func TestRunscNodeReattach(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "runscre-" + uuid.NewString()[:8]
	dir := t.TempDir()
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 3*time.Minute)
	first := startAgent(t, st, nodes.Config{ID: node}, testenv.RunscRuntime(t, dir, node))
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: runsc.Name, Image: image, SecretEnv: map[string]string{"TOKEN": "s3cr3t-value"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: counterScript})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the counter: %+v, %v", res, err)
	}
	pid := strings.TrimSpace(res.Stdout)
	before := readCounter(t, st, s.SessionID, pid)
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}

	second := startAgent(t, st, nodes.Config{ID: node}, testenv.RunscRuntime(t, dir, node))
	if got := second.Sessions(); len(got) != 1 {
		t.Fatalf("reattached %v, want the session", got)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if n := readCounter(t, st, s.SessionID, pid); n <= before {
			return fmt.Errorf("counter %d, want more than %d", n, before)
		}
		return nil
	})
	res, err = st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: `echo "$TOKEN"`})
	if err != nil || res.Stdout != "[REDACTED]\n" {
		t.Fatalf("exec after reattach = %q, %v; want the redacted secret", res.Stdout, err)
	}
	if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if left, _ := filepath.Glob(filepath.Join(dir, "sandboxes", "sb-*")); len(left) > 0 {
			return fmt.Errorf("sandbox directories left: %q", left)
		}
		return nil
	})
}

// counterScript keeps a counter in a shell's memory only: it counts up
// every 0.1 s, writes it to the workspace file c on SIGUSR1 and adds
// 1,000,000 to it on SIGUSR2. The exec prints the counter's pid and
// returns; the counter lives on in the background.
const counterScript = `(i=0; trap 'echo $i > c' USR1; trap 'i=$((i+1000000))' USR2; while :; do i=$((i+1)); sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $!`

// readCounter asks the counter pid of session id for its value, through
// the node, waiting for the answer.
func readCounter(t *testing.T, st *testenv.Stack, id, pid string) int {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	var n int
	testenv.Eventually(t, time.Minute, func() error {
		res, err := st.Client.Exec(ctx, id, commands.ExecArgs{Shell: "rm -f c; kill -USR1 " + pid + " && while [ ! -s c ]; do sleep 0.05; done; cat c"})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		n, err = strconv.Atoi(strings.TrimSpace(res.Stdout))
		return err
	})
	return n
}

// waitMillions waits until the counter pid of session id is at want
// millions (the millions are marks; it counts 10 a second) and returns it;
// a counter past want millions fails the test.
func waitMillions(t *testing.T, st *testenv.Stack, id, pid string, want int) int {
	t.Helper()
	var n int
	testenv.Eventually(t, time.Minute, func() error {
		if n = readCounter(t, st, id, pid); n/1_000_000 < want {
			return fmt.Errorf("counter %d, want %d million", n, want)
		}
		return nil
	})
	if n/1_000_000 != want {
		t.Fatalf("session %s: counter %d; want %d million", id, n, want)
	}
	return n
}

// TestRunscCheckpointResumeOnAnotherNode: a counter held only in a
// shell's memory on node A is checkpointed through the node (left
// running: it counts on; then stopping the session); node A goes away and
// a resume on node B brings the processes back running with the counter
// where it was; a fork ×3 from a memory checkpoint of the running sandbox
// gives three running counters, each counting on its own. The memory
// snapshot is in the chain with its digests; it cannot be hydrated; a checkpoint of a session on a
// runtime that cannot is policy_denied, of an unknown session
// session_not_found, of a stopped one invalid_state.
func TestRunscCheckpointResumeOnAnotherNode(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	nodeA, nodeB := "ckpa-"+uuid.NewString()[:8], "ckpb-"+uuid.NewString()[:8]
	rtA := testenv.RunscRuntime(t, t.TempDir(), nodeA)
	rtB := testenv.RunscRuntime(t, t.TempDir(), nodeB)
	loc, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 5*time.Minute)
	a := startAgent(t, st, nodes.Config{ID: nodeA, CheckpointDir: t.TempDir()}, rtA)
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "ckpl-" + uuid.NewString()[:8]}, loc)

	ls, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Checkpoint(ctx, ls.SessionID, commands.CheckpointArgs{}); !errors.Is(err, errcode.ErrPolicyDenied) {
		t.Errorf("checkpoint of a local session: %v; want policy_denied", err)
	}
	if _, err := st.Client.Checkpoint(ctx, uuid.NewString(), commands.CheckpointArgs{}); !errors.Is(err, errcode.ErrSessionNotFound) {
		t.Errorf("checkpoint of an unknown session: %v; want session_not_found", err)
	}

	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: runsc.Name, Image: image})
	if err != nil || s.Node != nodeA {
		t.Fatalf("create = %+v, %v; want on %s", s, err, nodeA)
	}
	defer func() { _ = st.Client.Delete(testenv.Context(t, time.Minute), s.SessionID) }()
	res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: counterScript})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the counter: %+v, %v", res, err)
	}
	pid := strings.TrimSpace(res.Stdout)
	readCounter(t, st, s.SessionID, pid)

	// A checkpoint while an exec runs is invalid_state: that command
	// could not be given back to its caller.
	inFlight := make(chan struct{})
	execDone := make(chan error, 1)
	go func() { // ends when the exec does (the file stop, below)
		var once sync.Once
		_, err := st.Client.ExecStream(ctx, s.SessionID, commands.ExecArgs{Shell: "echo go; while [ ! -e stop ]; do sleep 0.1; done"}, func(bool, []byte) {
			once.Do(func() { close(inFlight) })
		})
		execDone <- err
	}()
	select {
	case <-inFlight:
	case err := <-execDone:
		t.Fatalf("the exec ended before it was in flight: %v", err)
	}
	if _, err := st.Client.Checkpoint(ctx, s.SessionID, commands.CheckpointArgs{LeaveRunning: true}); !errors.Is(err, errcode.ErrInvalidState) {
		t.Errorf("checkpoint during an exec: %v; want invalid_state", err)
	}
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-execDone; err != nil {
		t.Fatal(err)
	}

	// Left running: the counter counts on in the same sandbox.
	kept, err := st.Client.Checkpoint(ctx, s.SessionID, commands.CheckpointArgs{LeaveRunning: true})
	if err != nil {
		t.Fatal(err)
	}
	if kept.Status != "running" || !kept.Snapshot.IsMemory() || kept.Snapshot.Memory.ImageSHA256 == "" || kept.Snapshot.RootSHA256 == "" {
		t.Errorf("checkpoint --leave-running = %+v; want running, a memory snapshot with digests", kept)
	}
	before := readCounter(t, st, s.SessionID, pid)
	testenv.Eventually(t, time.Minute, func() error {
		if n := readCounter(t, st, s.SessionID, pid); n <= before {
			return fmt.Errorf("counter %d, want past %d", n, before)
		}
		return nil
	})

	// Marked in memory only, then checkpointed, stopping the session.
	if res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "kill -USR2 " + pid}); err != nil || res.ExitCode != 0 {
		t.Fatalf("kill -USR2: %+v, %v", res, err)
	}
	// The shell runs its USR1 trap before a USR2 pending at once: wait
	// for the mark.
	marked := waitMillions(t, st, s.SessionID, pid, 1)
	stopped, err := st.Client.Checkpoint(ctx, s.SessionID, commands.CheckpointArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if stopped.Status != "stopped" || !stopped.Snapshot.IsMemory() || stopped.Snapshot.ID == kept.Snapshot.ID {
		t.Errorf("checkpoint = %+v; want stopped, a new memory snapshot", stopped)
	}
	if _, err := st.Client.Checkpoint(ctx, s.SessionID, commands.CheckpointArgs{}); !errors.Is(err, errcode.ErrInvalidState) {
		t.Errorf("checkpoint of a stopped session: %v; want invalid_state", err)
	}
	// The chain records the memory snapshot with its digests, in data
	// that decodes strictly as its type.
	var recorded bool
	for _, ev := range sessionEvents(t, st, "default", s.SessionID) {
		if ev.Op != string(commands.OpCheckpoint) || ev.Phase == events.PhaseFinish && ev.ErrorCode != "" {
			continue // a failed finish has no data
		}
		if d := events.NewData(ev.Op, ev.Phase); d == nil || jsonv2.Unmarshal(ev.Data, d, jsonv2.RejectUnknownMembers(true)) != nil {
			t.Errorf("checkpoint %s data %s does not decode strictly as %T", ev.Phase, ev.Data, d)
		}
		if ev.Phase == events.PhaseFinish {
			d, err := events.DecodeData[events.SnapshotFinish](ev)
			if err == nil && d.Snapshot != nil && d.Snapshot.ID == stopped.Snapshot.ID && *d.Snapshot.Memory == *stopped.Snapshot.Memory {
				recorded = true
			}
		}
	}
	if !recorded {
		t.Errorf("no checkpoint finish records snapshot %s with its digests", stopped.Snapshot.ID)
	}

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	startAgent(t, st, nodes.Config{ID: nodeB, CheckpointDir: t.TempDir()}, rtB)
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, n := range st.Scheduler.Nodes() {
			if n.Node == nodeB {
				return nil
			}
		}
		return errors.New("node B not registered yet")
	})
	// A checkpoint whose stored chunks are not their bytes is refused
	// with snapshot_corrupt, and nothing runs; put back, it resumes.
	restore := tamperChunks(t, st)
	if _, err := st.Client.Resume(ctx, s.SessionID, nil); !errors.Is(err, errcode.ErrSnapshotCorrupt) {
		t.Errorf("resume from tampered chunks: %v; want snapshot_corrupt", err)
	}
	restore()
	rr, err := st.Client.Resume(ctx, s.SessionID, nil)
	if err != nil || rr.Node != nodeB || !rr.Memory || rr.SnapshotID != stopped.Snapshot.ID || rr.Epoch != 2 {
		t.Fatalf("resume = %+v, %v; want the memory snapshot %s restored on %s at epoch 2", rr, err, stopped.Snapshot.ID, nodeB)
	}
	// The same process, with its memory: the mark is there and it counts on.
	after := readCounter(t, st, s.SessionID, pid)
	if after < marked {
		t.Fatalf("counter %d after the resume; want at least %d (it was checkpointed there)", after, marked)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if n := readCounter(t, st, s.SessionID, pid); n <= after {
			return fmt.Errorf("counter %d, want past %d", n, after)
		}
		return nil
	})

	if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: stopped.Snapshot.ID}); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Errorf("hydrate from a memory snapshot: %v; want invalid_request", err)
	}

	// Fork ×3 from a memory checkpoint of the running sandbox: three
	// running copies of the counter, each on its own from then on.
	running, err := st.Client.Checkpoint(ctx, s.SessionID, commands.CheckpointArgs{LeaveRunning: true})
	if err != nil {
		t.Fatal(err)
	}
	fk, err := st.Client.Fork(ctx, s.SessionID, commands.ForkRequest{N: 3, SnapshotID: running.Snapshot.ID})
	if err != nil || len(fk.Children) != 3 || len(fk.Failed) != 0 {
		t.Fatalf("fork -n 3 = %+v, %v", fk, err)
	}
	for _, c := range fk.Children {
		defer func() { _ = st.Client.Delete(testenv.Context(t, time.Minute), c) }()
	}
	// Child i gets i marks of 1,000,000, each read back before the next
	// (two pending signals of one kind are one); the parent none more.
	for i, c := range fk.Children {
		for range i {
			if res, err := st.Client.Exec(ctx, c, commands.ExecArgs{Shell: "kill -USR2 " + pid}); err != nil || res.ExitCode != 0 {
				t.Fatalf("child %d: kill -USR2: %+v, %v", i, res, err)
			}
			readCounter(t, st, c, pid)
		}
	}
	for i, c := range fk.Children {
		waitMillions(t, st, c, pid, marked/1_000_000+i) // its own marks only
	}
	if got := readCounter(t, st, s.SessionID, pid) / 1_000_000; got != marked/1_000_000 {
		t.Errorf("parent's counter at %d million after the children's marks; want %d", got, marked/1_000_000)
	}

	// Retention counts a memory checkpoint's chunks as any manifest's:
	// keeping the newest snapshot, a sweep (dry, a day on) plans to remove
	// the older checkpoints and chunks only they name, never a chunk of
	// the kept one.
	store, err := objectstore.Open(ctx, st.JS, "")
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := store.GetManifest(ctx, "default", s.SessionID, running.Snapshot.ID, snapshot.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	keptChunks := map[string]bool{}
	for d := range m.ChunkSet() {
		name, err := objectstore.ChunkName("default", d)
		if err != nil {
			t.Fatal(err)
		}
		keptChunks[name] = true
	}
	records := func(context.Context) ([]projection.SessionRecord, error) {
		r := projection.SessionRecord{}
		r.Tenant, r.ID, r.Status = "default", s.SessionID, projection.StatusRunning
		r.LastSnapshot = &projection.Snapshot{ID: running.Snapshot.ID}
		return []projection.SessionRecord{r}, nil
	}
	plan, err := retention.SweepAt(ctx, time.Now().Add(24*time.Hour), store, records,
		retention.Policy{TransferTTL: time.Hour, OrphanGrace: retention.MinOrphanGrace, KeepLast: 1}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var chunks int
	for _, r := range plan {
		if keptChunks[r.Name] {
			t.Errorf("the sweep would remove %s, a chunk of the kept memory checkpoint", r.Name)
		}
		if strings.HasPrefix(r.Name, objectstore.ChunkPrefix("default")) {
			chunks++
		}
	}
	if chunks == 0 {
		t.Errorf("the sweep plans to remove no chunk of the older checkpoints: %+v", plan)
	}
}

// tamperChunks replaces every chunk of tenant default in the workspace
// bucket with other bytes (its metadata kept) and returns a func that puts
// them back.
func tamperChunks(t *testing.T, st *testenv.Stack) func() {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	obs, err := st.JS.ObjectStore(ctx, "sbx_workspaces")
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type kept struct {
		meta jetstream.ObjectMeta
		data []byte
	}
	var saved []kept
	for _, info := range infos {
		if !strings.HasPrefix(info.Name, objectstore.ChunkPrefix("default")) {
			continue
		}
		data, err := obs.GetBytes(ctx, info.Name)
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, kept{info.ObjectMeta, data})
		if _, err := obs.Put(ctx, info.ObjectMeta, strings.NewReader("not the chunk")); err != nil {
			t.Fatal(err)
		}
	}
	if len(saved) == 0 {
		t.Fatal("no chunks to tamper with")
	}
	return func() {
		t.Helper()
		for _, k := range saved {
			if _, err := obs.Put(ctx, k.meta, bytes.NewReader(k.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
}
