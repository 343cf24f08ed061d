package nodes_test

import (
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/testenv"
)

// TestStopThenShutdownStoresOneSnapshot (issue 26): what the Python
// provider does for a Runner-owned session (the SDK's stop: persist, then
// its own tar of the workspace made in it and removed; the SDK's
// shutdown: stop, which persists, then shutdown) leaves ONE snapshot of
// the session in the store, in both snapshot formats and on both
// runtimes: the stop's persist finds the workspace unchanged and records
// the persist's snapshot (SnapshotFinish.Unchanged).
func TestStopThenShutdownStoresOneSnapshot(t *testing.T) {
	for _, format := range []string{nodes.SnapshotsManifest, nodes.SnapshotsTar} {
		for _, k := range runtimeKinds() {
			t.Run(format+"/"+k.name, func(t *testing.T) {
				st, image := snapStack(t, k, nodes.Config{Snapshots: format})
				ctx := testenv.Context(t, 3*time.Minute)
				s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
				if err != nil {
					t.Fatal(err)
				}
				shell(t, st, s.SessionID, `mkdir -p src && echo 'print(1)' > src/main.py && head -c 300000 /dev/urandom > data.bin`)
				first, err := st.Client.Persist(ctx, s.SessionID)
				if err != nil {
					t.Fatal(err)
				}
				// The provider's persist_workspace: a tar in the workspace, read, removed.
				shell(t, st, s.SessionID, `tar -cf .paddock-sdk-1.tar -C "$PWD" . 2>/dev/null; test -s .paddock-sdk-1.tar`)
				if _, err := st.Client.ReadFile(ctx, s.SessionID, ".paddock-sdk-1.tar"); err != nil {
					t.Fatal(err)
				}
				if err := st.Client.Remove(ctx, s.SessionID, ".paddock-sdk-1.tar", false, true); err != nil {
					t.Fatal(err)
				}
				if err := st.Client.Stop(ctx, s.SessionID); err != nil {
					t.Fatal(err)
				}
				stop := lastFinishData[events.SnapshotFinish](t, st, s.SessionID, commands.OpStop)
				if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
					t.Fatal(err)
				}
				snaps, err := store(t, st).Snapshots(ctx, objectstore.SnapshotPrefix("default", s.SessionID))
				if err != nil {
					t.Fatal(err)
				}
				if len(snaps) != 1 || snaps[0].ID != first.ID {
					ids := make([]string, len(snaps))
					for i, sn := range snaps {
						ids[i] = sn.ID + " (" + sn.Format + ")"
					}
					t.Fatalf("the store holds %d snapshots of the session %v after persist, stop, shutdown; want one, the persist's %s", len(snaps), ids, first.ID)
				}
				if !stop.Unchanged || stop.Snapshot == nil || stop.Snapshot.ID != first.ID {
					t.Errorf("stop finish = %+v; want the persist's snapshot %s, unchanged", stop, first.ID)
				}
			})
		}
	}
}
