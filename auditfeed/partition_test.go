package auditfeed_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auditfeed"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// TestAuditorConfinedInEveryPartition: on a deployment of 4 partitions
// holding tenant evil's events in every partition, tenant acme's auditor
// cannot read them in any: no consumer of its own, no direct or stored
// message get on any partition's stream, and no provisioned consumer whose
// filter reaches past acme.
func TestAuditorConfinedInEveryPartition(t *testing.T) {
	st := auth.Open(t.TempDir())
	for _, id := range [][3]string{{"engine", "engine", ""}, {"aud-acme", "auditor", "acme"}} {
		if _, err := st.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
			t.Fatal(err)
		}
	}
	url := testenv.StartAuthBroker(t, st).ClientURL()
	engine := testenv.ConnectAs(t, url, st.CredsPath("engine"))
	ejs := testenv.JetStream(t, engine.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := events.EnsureStream(ctx, ejs, events.StreamConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	log, err := events.OpenLog(ctx, ejs, "", "")
	if err != nil {
		t.Fatal(err)
	}
	// evil's sessions until every partition holds one.
	seen := map[int]string{}
	for i := 0; len(seen) < 4 && i < 1000; i++ {
		s := "s" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		k := events.PartitionOf("evil", s, 4)
		if _, ok := seen[k]; ok {
			continue
		}
		ev := &events.Event{Version: events.Version, EventID: s, TS: time.Now().UTC(), Tenant: "evil", SessionID: s, Seq: 1, Op: "exec", Phase: events.PhaseStart, SpanID: "x"}
		if _, err := log.Append(ctx, ev, 0); err != nil {
			t.Fatal(err)
		}
		seen[k] = s
	}
	if len(seen) != 4 {
		t.Fatalf("evil's sessions in %d partitions, want 4", len(seen))
	}
	svc := auditfeed.New(engine.Conn, ejs, auditfeed.Config{}, nil)
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)

	c, err := auth.LoadCreds(st.CredsPath("aud-acme"))
	if err != nil {
		t.Fatal(err)
	}
	aconn := testenv.ConnectAs(t, url, st.CredsPath("aud-acme"))
	ajs := testenv.JetStream(t, aconn.Conn)
	for k, s := range seen {
		name := events.PartitionStream("", k)
		subj := log.Subjects().SessionFilter("evil", s)
		actx, acancel := context.WithTimeout(ctx, time.Second)
		if _, err := ajs.OrderedConsumer(actx, name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}}); err == nil {
			t.Errorf("partition %d: the auditor made a consumer of its own on %s", k, name)
		}
		acancel()
		actx, acancel = context.WithTimeout(ctx, time.Second)
		if msg, err := ajs.Conn().RequestWithContext(actx, "$JS.API.DIRECT.GET."+name+"."+log.Subjects().Session("evil", s, "exec", events.PhaseStart), nil); err == nil && len(msg.Data) > 0 && msg.Header.Get("Nats-Sequence") != "" {
			t.Errorf("partition %d: the auditor read evil's event by a direct get on %s", k, name)
		}
		acancel()
		actx, acancel = context.WithTimeout(ctx, time.Second)
		if msg, err := ajs.Conn().RequestWithContext(actx, "$JS.API.STREAM.MSG.GET."+name, []byte(`{"seq":1}`)); err == nil && len(msg.Data) > 0 && !containsError(msg.Data) {
			t.Errorf("partition %d: the auditor got a stored message of %s: %s", k, name, msg.Data)
		}
		acancel()
		// The engine provisions nothing that reaches past acme, in any partition.
		provision := auditfeed.Provisioner(aconn.Conn, "", c.Name, c.Tenant)
		for _, filter := range []string{subj, "sbx.pevt.>", "sbx.pevt.*.evil.>", "sbx.pevt." + string(rune('0'+k)) + ".>", "sbx.pevt.*.*.>"} {
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			err := provision(pctx, events.ConsumerSpec{Name: c.Consumer(), Filter: filter})
			pcancel()
			if errcode.Of(err) != errcode.PermissionDenied {
				t.Errorf("partition %d: provisioning filter %s: got %v, want permission_denied", k, filter, err)
			}
		}
	}
}

func containsError(data []byte) bool {
	for i := 0; i+7 <= len(data); i++ {
		if string(data[i:i+7]) == `"error"` {
			return true
		}
	}
	return false
}

// partitionedFeed serves auditors' consumers on an auth broker whose
// events are spread over 4 partitions, with one session of acme and one
// of evil in every partition; it returns the engine's log and acme's
// sessions by partition.
func partitionedFeed(t *testing.T, ctx context.Context) (*feed, *events.Log, map[int]string) {
	t.Helper()
	st := auth.Open(t.TempDir())
	for _, id := range [][3]string{{"engine", "engine", ""}, {"aud-acme", "auditor", "acme"}, {"aud-all", "auditor", ""}} {
		if _, err := st.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
			t.Fatal(err)
		}
	}
	f := &feed{st: st, url: testenv.StartAuthBroker(t, st).ClientURL()}
	f.engine = testenv.ConnectAs(t, f.url, st.CredsPath("engine"))
	f.ejs = testenv.JetStream(t, f.engine.Conn)
	if _, err := events.EnsureStream(ctx, f.ejs, events.StreamConfig{Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	log, err := events.OpenLog(ctx, f.ejs, "", "")
	if err != nil {
		t.Fatal(err)
	}
	acme := map[int]string{}
	for _, tenant := range []string{"acme", "evil"} {
		seen := map[int]bool{}
		for i := 0; len(seen) < 4 && i < 1000; i++ {
			s := "s" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			k := events.PartitionOf(tenant, s, 4)
			if seen[k] {
				continue
			}
			appendEvent(t, ctx, log, tenant, s, 1)
			seen[k] = true
			if tenant == "acme" {
				acme[k] = s
			}
		}
		if len(seen) != 4 {
			t.Fatalf("%s's sessions in %d partitions, want 4", tenant, len(seen))
		}
	}
	svc := auditfeed.New(f.engine.Conn, f.ejs, auditfeed.Config{}, nil)
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return f, log, acme
}

func appendEvent(t *testing.T, ctx context.Context, log *events.Log, tenant, session string, seq uint64) {
	t.Helper()
	ev := &events.Event{Version: events.Version, EventID: tenant + session + string(rune('0'+seq)), TS: time.Now().UTC(), Tenant: tenant, SessionID: session, Seq: seq, Op: "exec", Phase: events.PhaseStart, SpanID: "x"}
	if _, err := log.Append(ctx, ev, 0); err != nil {
		t.Fatal(err)
	}
}

// TestAuditorReadsEveryPartition: on a deployment of 4 partitions, an
// auditor of acme reads acme's events of every partition (once, and
// durably, resuming every partition where it left off) through the
// consumers the engine provisions, and none of evil's; an auditor of
// every tenant reads both. A stream that is no partition, a filter of
// another partition than the stream's, and node events off partition 0
// are refused.
func TestAuditorReadsEveryPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, elog, _ := partitionedFeed(t, ctx)
	_, log, provision, name := f.auditor(t, "aud-acme")
	var got []events.Msg
	collect := func(m events.Msg) error { got = append(got, m); return nil }
	sessionsOf := func(tenant string) map[string]bool {
		t.Helper()
		out := map[string]bool{}
		for _, m := range got {
			ev, err := m.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Tenant != tenant {
				t.Fatalf("tenant %s's event %s read by %s's auditor", ev.Tenant, m.Subject, tenant)
			}
			out[ev.SessionID] = true
		}
		return out
	}
	filter := "sbx.evt.acme.>" // the unpartitioned form, as `events tail --tenant acme` asks
	if err := log.Read(ctx, events.ReadOptions{Filters: []string{filter}, Consumer: name, Provision: provision}, collect); err != nil {
		t.Fatal(err)
	}
	if s := sessionsOf("acme"); len(s) != 4 || len(got) != 4 {
		t.Fatalf("read %d events of sessions %v, want acme's 4 (one per partition)", len(got), s)
	}
	// Durably: every partition, then nothing more, then only what is new.
	got = nil
	durable := func() {
		t.Helper()
		if err := log.ReadDurable(ctx, events.DurableOptions{Name: name, Filters: []string{filter}, Provision: provision}, collect); err != nil {
			t.Fatal(err)
		}
	}
	durable()
	if s := sessionsOf("acme"); len(s) != 4 || len(got) != 4 {
		t.Fatalf("durable read %d events of sessions %v, want acme's 4", len(got), s)
	}
	for k := range 4 {
		if _, err := f.ejs.Consumer(ctx, events.PartitionStream("", k), name); err != nil {
			t.Fatalf("partition %d: no durable consumer %s: %v", k, name, err)
		}
	}
	got = nil
	durable()
	if len(got) != 0 {
		t.Fatalf("second durable read delivered %d events, want none", len(got))
	}
	fresh := ""
	for i := 0; fresh == "" && i < 1000; i++ {
		if s := "new" + string(rune('a'+i%26)) + string(rune('a'+i/26)); events.PartitionOf("acme", s, 4) == 3 {
			fresh = s
		}
	}
	appendEvent(t, ctx, elog, "acme", fresh, 1)
	appendEvent(t, ctx, elog, "evil", "zz", 1)
	durable()
	if len(got) != 1 || got[0].Stream != events.PartitionStream("", 3) {
		t.Fatalf("durable read after one new acme event on partition 3: %d events (%v), want that one", len(got), got)
	}
	// An auditor of every tenant reads both tenants in every partition.
	_, alog, all, allName := f.auditor(t, "aud-all")
	got = nil
	if err := alog.Read(ctx, events.ReadOptions{Consumer: allName, Provision: all}, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 {
		t.Fatalf("the auditor of every tenant read %d events, want 10", len(got))
	}
	// Bad requests.
	for _, c := range []struct {
		spec events.ConsumerSpec
		want errcode.Code
	}{
		{events.ConsumerSpec{Stream: "SBX_EVENTS_4", Filter: "sbx.pevt.4.acme.>"}, errcode.InvalidRequest},
		{events.ConsumerSpec{Stream: "OBJ_workspaces", Filter: "sbx.pevt.1.acme.>"}, errcode.InvalidRequest},
		{events.ConsumerSpec{Stream: "SBX_EVENTS_1", Filter: "sbx.pevt.2.acme.>"}, errcode.PermissionDenied},
		{events.ConsumerSpec{Stream: "SBX_EVENTS_1", Filter: "sbx.pevt.1.evil.>"}, errcode.PermissionDenied},
		{events.ConsumerSpec{Stream: "SBX_EVENTS_1", Filter: "sbx.pevt.1.>"}, errcode.PermissionDenied},
		{events.ConsumerSpec{Stream: "SBX_EVENTS_1", Filter: "sbx.pevt.*.acme.>"}, errcode.PermissionDenied},
		{events.ConsumerSpec{Stream: "SBX_EVENTS_1", Filter: "sbx.nodeevt.>"}, errcode.PermissionDenied},
		{events.ConsumerSpec{Filter: "sbx.evt.acme.>"}, errcode.PermissionDenied}, // not partition 0's subjects
	} {
		c.spec.Name = name
		if err := provision(ctx, c.spec); errcode.Of(err) != c.want {
			t.Errorf("stream %q filter %s: got %v, want %s", c.spec.Stream, c.spec.Filter, err, c.want)
		}
	}
	if err := provision(ctx, events.ConsumerSpec{Name: name, Filter: "sbx.nodeevt.>", Durable: true}); err != nil {
		t.Errorf("node events on partition 0: %v", err)
	}
}
