package nodes_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

// TestPersistQuota: on a node whose JetStream store holds 48 MiB, split
// as the engine splits it, persisting a 4 MiB workspace again and again
// fills the workspace bucket's quota: the next persist fails with
// storage_quota_exceeded (not retryable), recorded as the persist's
// failed finish, while execs go on and their events land. Deleting the
// session's snapshots frees the space, and the next persist succeeds, with
// nothing restarted.
func TestPersistQuota(t *testing.T) {
	const store = 48 << 20
	// Tar snapshots: deleting a manifest snapshot frees no chunk (engine
	// gc does), and this test frees space by deleting snapshots.
	st := testenv.StartStack(t, testenv.StackOptions{Broker: broker.Config{MaxStore: store, SyncInterval: time.Second}, Node: nodes.Config{Snapshots: nodes.SnapshotsTar}})
	ctx := testenv.Context(t, 2*time.Minute)
	def := storage.Defaults(store)
	if _, err := events.EnsureStream(ctx, st.JS, events.StreamConfig{MaxBytes: def.Events}); err != nil {
		t.Fatal(err)
	}
	if _, err := objectstore.Ensure(ctx, st.JS, objectstore.Config{MaxBytes: def.Objects}); err != nil {
		t.Fatal(err)
	}
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	exec := func(shell string) {
		t.Helper()
		if res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: shell}); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %+v, %v", shell, res, err)
		}
	}
	exec("head -c 4194304 /dev/urandom > big")
	persisted := 0
	var refused error
	for ; persisted < 20; persisted++ {
		// Each persist has something new: an unchanged workspace's persist
		// would keep the last snapshot and store nothing (issue 26).
		exec("echo " + strconv.Itoa(persisted) + " > n")
		if _, refused = st.Client.Persist(ctx, s.SessionID); refused != nil {
			break
		}
	}
	var e *errcode.Error
	if !errors.As(refused, &e) || e.Code != errcode.StorageQuotaExceeded || e.Retryable() || persisted < 4 {
		t.Fatalf("after %d persists of 4 MiB into a %d-byte quota: %v; want storage_quota_exceeded, not retryable", persisted, def.Objects, refused)
	}
	t.Logf("refused after %d snapshots: %s", persisted, e.Message)
	for range 3 {
		exec("echo still here")
	}

	evs, err := st.Log.Session(ctx, "default", s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	failedPersist, execsAfter := -1, 0
	for i, ev := range evs {
		switch {
		case ev.Op == "persist" && ev.Phase == events.PhaseFinish && ev.ErrorCode != "":
			if ev.ErrorCode != string(errcode.StorageQuotaExceeded) || ev.ErrorRetryable == nil || *ev.ErrorRetryable || ev.OK == nil || *ev.OK {
				t.Fatalf("the failed persist's finish: %+v; want storage_quota_exceeded, ok false, retryable false", ev)
			}
			failedPersist = i
		case ev.Op == "exec" && ev.Phase == events.PhaseFinish && failedPersist >= 0 && ev.OK != nil && *ev.OK:
			execsAfter++
		}
	}
	if failedPersist < 0 || execsAfter != 3 {
		t.Fatalf("events: failed persist at %d, %d execs recorded after it; want the failure recorded and 3 execs after it", failedPersist, execsAfter)
	}

	ws, err := objectstore.Open(ctx, st.JS, "")
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := ws.Snapshots(ctx, objectstore.SnapshotPrefix("default", s.SessionID))
	if err != nil || len(snaps) != persisted {
		t.Fatalf("the session's snapshots: %d, %v; want the %d persisted", len(snaps), err, persisted)
	}
	for _, sn := range snaps[:len(snaps)-1] {
		if err := ws.DeleteSnapshot(ctx, "default", s.SessionID, sn.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Client.Persist(ctx, s.SessionID); err != nil {
		t.Fatalf("persist after deleting snapshots: %v", err)
	}
}
