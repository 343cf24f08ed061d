package nodes_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

// TestCriticalDiskRefusesCreates: a node whose sandboxes' filesystem is
// critically full refuses a create sent straight to it (not through the
// scheduler, which would not place it there) with no_capacity, says so in
// its heartbeat, and takes creates again once space is freed.
func TestCriticalDiskRefusesCreates(t *testing.T) {
	dir := testenv.Tmpfs(t, 16<<20)
	th := storage.Thresholds{Critical: storage.Threshold{Bytes: 4 << 20}}
	w, err := storage.NewDiskWatcher(storage.DiskWatchConfig{Paths: []string{dir}, Thresholds: &th}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	testenv.StartAgent(t, st.Broker.ClientURL(), nodes.Config{ID: "disky", Disks: w})
	nc := testenv.Connect(t, st.Broker.ClientURL())
	ctx := testenv.Context(t, time.Minute)
	create := func(id string) *commands.Reply {
		t.Helper()
		args, _ := json.Marshal(commands.Placement{Tenant: "default", SessionID: id, Spec: commands.CreateArgs{Runtime: "local"}})
		body, _ := json.Marshal(commands.Request{Version: commands.Version, Args: args})
		m, err := nc.RequestWithContext(ctx, commands.Subjects{}.Node("disky", "create"), body)
		if err != nil {
			t.Fatal(err)
		}
		var rep commands.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatal(err)
		}
		return &rep
	}
	ballast := filepath.Join(dir, "ballast")
	testenv.Fill(t, ballast)
	w.Look(time.Now())
	rep := create("full-1")
	if rep.Error == nil || rep.Error.Code != errcode.NoCapacity || !strings.Contains(rep.Error.Message, dir) {
		t.Fatalf("create on a critically full node: %+v, want no_capacity naming %s", rep.Error, dir)
	}
	beats, err := nc.SubscribeSync(commands.Subjects{}.Heartbeat("disky"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(commands.Subjects{}.Announce(), nil); err != nil {
		t.Fatal(err)
	}
	m, err := beats.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info nodes.Info
	if err := json.Unmarshal(m.Data, &info); err != nil || !info.DiskCritical() || len(info.Disks) != 1 || info.Disks[0].Path != dir {
		t.Fatalf("the node's heartbeat: %+v, %v; want its disk %s critical", info, err, dir)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	w.Look(time.Now())
	if rep := create("freed-1"); rep.Error != nil {
		t.Fatalf("create after space was freed: %+v", rep.Error)
	}
}
