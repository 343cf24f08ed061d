package projector_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/replay"
	"github.com/paddock-dev/paddock/testenv"
)

func start(t *testing.T, js jetstream.JetStream, cfg projector.Config) *projector.Projector {
	t.Helper()
	p, err := projector.New(js, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(testenv.Context(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func closeP(t *testing.T, p *projector.Projector) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func caughtUp(t *testing.T, p *projector.Projector) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() error {
		lag, err := p.Lag(context.Background())
		if err != nil {
			return err
		}
		if lag > 0 {
			return fmt.Errorf("lag %d", lag)
		}
		return nil
	})
}

// verify rebuilds the projection from the stream and compares it with the
// buckets.
func verify(t *testing.T, js jetstream.JetStream, log *events.Log) replay.Report {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	res, err := replay.Rebuild(ctx, log, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := projector.EnsureBuckets(ctx, js, projector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Verify(ctx, b, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) > 0 || len(rep.Newer) > 0 {
		t.Fatalf("projection differs from the replay: %v (newer: %v)", rep.Differences, rep.Newer)
	}
	return rep
}

// records returns every session record in the bucket.
func records(t *testing.T, js jetstream.JetStream) map[string]projection.SessionRecord {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, projector.SessionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := projector.ReadAll[projection.SessionRecord](ctx, kv, ">")
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestProjectsARealStack: sessions driven through the client into every
// state are projected with the right status, read back through the
// client, and equal the replay of the stream.
func TestProjectsARealStack(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Tenant: "acme"})
	p := start(t, st.JS, projector.Config{})
	ctx := testenv.Context(t, 30*time.Second)
	c := st.Client
	want := map[string]projection.Status{}
	create := func(id string, labels map[string]string) {
		t.Helper()
		if _, err := c.Create(ctx, commands.CreateArgs{SessionID: id, Runtime: "local", Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	create("running", map[string]string{"team": "a"})
	if _, err := c.Exec(ctx, "running", commands.ExecArgs{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	want["running"] = projection.StatusRunning
	create("stopped", map[string]string{"team": "b"})
	if err := c.Stop(ctx, "stopped"); err != nil {
		t.Fatal(err)
	}
	want["stopped"] = projection.StatusStopped
	create("down", nil)
	if err := c.Shutdown(ctx, "down"); err != nil {
		t.Fatal(err)
	}
	want["down"] = projection.StatusShutDown
	create("gone", nil)
	if err := c.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	want["gone"] = projection.StatusDeleted
	if _, err := c.Create(ctx, commands.CreateArgs{SessionID: "failed", Runtime: "local", User: "nobody"}); err == nil {
		t.Fatal("create as another user on the local runtime succeeded")
	}
	want["failed"] = projection.StatusFailed
	caughtUp(t, p)

	all, err := c.Sessions(ctx, client.SessionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(want) {
		t.Fatalf("Sessions returned %d, want %d", len(all), len(want))
	}
	for _, r := range all {
		if r.Status != want[r.ID] || r.Node != "node-1" || r.Applied != r.LastSeq || r.ProblemCount != 0 || len(r.InFlight) != 0 {
			t.Errorf("%s = %s on %q, applied %d of %d, %d problems; want %s on node-1, clean", r.ID, r.Status, r.Node, r.Applied, r.LastSeq, r.ProblemCount, want[r.ID])
		}
	}
	stopped, err := c.Sessions(ctx, client.SessionFilter{Status: projection.StatusStopped})
	if err != nil || len(stopped) != 1 || stopped[0].ID != "stopped" {
		t.Fatalf("Sessions(status stopped) = %v, %v; want the stopped one", stopped, err)
	}
	teamA, err := c.Sessions(ctx, client.SessionFilter{Labels: map[string]string{"team": "a"}})
	if err != nil || len(teamA) != 1 || teamA[0].ID != "running" {
		t.Fatalf("Sessions(team=a) = %v, %v; want the running one", teamA, err)
	}
	rec, err := c.Inspect(ctx, "failed")
	if err != nil || rec.LastError == nil || rec.LastError.Code != string(errcode.InvalidRequest) {
		t.Fatalf("Inspect(failed) = %+v, %v; want the create's error", rec, err)
	}
	if _, err := c.Inspect(ctx, "never"); !errors.Is(err, errcode.ErrSessionNotFound) {
		t.Fatalf("Inspect(never) = %v, want session_not_found", err)
	}
	nodes, err := st.JS.KeyValue(ctx, projector.NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := nodes.Get(ctx, "node-1"); err != nil || !json.Valid(e.Value()) {
		t.Fatalf("node-1 not projected: %v", err)
	} else {
		var n projection.NodeRecord
		_ = json.Unmarshal(e.Value(), &n)
		if n.Status != projection.NodeUp || len(n.Runtimes) == 0 {
			t.Fatalf("node-1 = %+v, want up with its runtimes", n)
		}
	}
	if s := p.Stats(); s.Problems != 0 || s.Taken == 0 {
		t.Fatalf("stats = %+v, want events taken and no problems", s)
	}
	verify(t, st.JS, st.Log)

	// A record the bucket really lacks stays a difference: the verifier
	// reads it again from the bucket's leader, which lacks it too.
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := projector.OpenBuckets(ctx, st.JS)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sessions.Delete(ctx, projection.SessionKey("acme", "stopped")); err != nil {
		t.Fatal(err)
	}
	res, err := replay.Rebuild(ctx, st.Log, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Verify(ctx, b, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 1 || rep.Differences[0].KV != "missing" || rep.Reread != 1 {
		t.Fatalf("verify after a record was deleted: differences %v, reread %d; want the one missing record, read again once", rep.Differences, rep.Reread)
	}
}
