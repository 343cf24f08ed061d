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
