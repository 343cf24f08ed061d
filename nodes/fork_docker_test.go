package nodes_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// TestDockerForkFromPool: a fork of 8 on a Docker node with a warm pool
// claims pooled sandboxes for the children (their spec is the parent's,
// which matches the pool), each restored with the parent's files and
// recording the parent point.
func TestDockerForkFromPool(t *testing.T) {
	const size = 9 // the parent and its 8 children
	pn := startPoolNode(t, "forkpool", size)
	st, image := pn.st, pn.image
	ctx := testenv.Context(t, 4*time.Minute)
	testenv.Eventually(t, 3*time.Minute, func() error { return pn.freeIs(size) })
	parent, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, Env: map[string]string{"WHO": "family"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.WriteFile(ctx, parent.SessionID, "src/main.txt", []byte(strings.Repeat("x", 100_000)), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := st.Client.Fork(ctx, parent.SessionID, commands.ForkRequest{N: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Children) != 8 || len(res.Failed) != 0 {
		t.Fatalf("fork: %d children, failed %+v", len(res.Children), res.Failed)
	}
	for _, child := range res.Children {
		evs := sessionEvents(t, st, "default", child)
		cs, err := events.DecodeData[events.CreateStart](evs[0])
		if err != nil || cs.Parent == nil || *cs.Parent != res.Parent {
			t.Fatalf("child %s create start parent %+v (%v), want %+v", child, cs.Parent, err, res.Parent)
		}
		var fin events.StatusFinish
		for _, ev := range evs {
			if ev.Op == string(commands.OpCreate) && ev.Phase == events.PhaseFinish {
				if err := json.Unmarshal(ev.Data, &fin); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !fin.Pooled {
			t.Errorf("child %s was made cold (%+v), want a pooled sandbox", child, fin.Made)
		}
		out, err := st.Client.Exec(ctx, child, commands.ExecArgs{Shell: `echo "$WHO $(wc -c < src/main.txt)"`})
		if err != nil || strings.TrimSpace(string(out.Stdout)) != "family 100000" {
			t.Errorf("child %s: %q %v, want the parent's env and file", child, out.Stdout, err)
		}
	}
	for _, id := range append(res.Children, parent.SessionID) {
		if err := st.Client.Delete(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
}
