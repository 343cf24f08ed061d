package auditfeed_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auditfeed"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

type feed struct {
	st     *auth.Store
	url    string
	engine *testenv.Conn
	ejs    jetstream.JetStream
}

// startFeed serves auditors' consumers on an auth broker with an events
// stream holding one event of tenant acme and one of evil.
func startFeed(t *testing.T) *feed {
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.ejs.CreateStream(ctx, jetstream.StreamConfig{Name: events.DefaultStream, Subjects: []string{"sbx.evt.>", "sbx.nodeevt.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"sbx.evt.acme.s1.exec.start", "sbx.evt.evil.s2.exec.start", "sbx.nodeevt.n1.registered"} {
		if _, err := f.ejs.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	svc := auditfeed.New(f.engine.Conn, f.ejs, auditfeed.Config{}, nil)
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return f
}

func (f *feed) auditor(t *testing.T, name string) (*testenv.Conn, *events.Log, events.Provisioner, string) {
	t.Helper()
	c, err := auth.LoadCreds(f.st.CredsPath(name))
	if err != nil {
		t.Fatal(err)
	}
	conn := testenv.ConnectAs(t, f.url, f.st.CredsPath(name))
	return conn, events.NewLog(testenv.JetStream(t, conn.Conn), "", ""), auditfeed.Provisioner(conn.Conn, "", c.Name, c.Tenant), c.Consumer()
}

// TestAuditorReadsThroughProvisionedConsumer: an auditor reads its
// tenant's events (once, and durably) through the pull consumer the
// engine made, and is refused any filter beyond its tenant.
func TestAuditorReadsThroughProvisionedConsumer(t *testing.T) {
	f := startFeed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, log, provision, name := f.auditor(t, "aud-acme")
	var got []string
	collect := func(m events.Msg) error { got = append(got, m.Subject); return nil }
	if err := log.Read(ctx, events.ReadOptions{Filters: []string{"sbx.evt.acme.*.*.*"}, Consumer: name, Provision: provision}, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "sbx.evt.acme.s1.exec.start" {
		t.Fatalf("read %v, want acme's one event", got)
	}
	got = nil
	if err := log.ReadDurable(ctx, events.DurableOptions{Name: name, Filters: []string{"sbx.nodeevt.>"}, Provision: provision}, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "sbx.nodeevt.n1.registered" {
		t.Fatalf("durable read %v, want the node event", got)
	}
	info, err := f.ejs.Consumer(ctx, events.DefaultStream, name)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.DeliverSubject != "" || c.AckPolicy != jetstream.AckExplicitPolicy {
		t.Fatalf("provisioned durable consumer: deliver subject %q, ack %v; want a pull consumer with explicit acks", c.DeliverSubject, c.AckPolicy)
	}
	for _, filter := range []string{"sbx.evt.evil.>", "sbx.evt.*.>", "sbx.evt.>", ">", "sbx.>", "sbx.node.n1.cordon", "sbx.evt.acme", "sbx.evt..s1.>"} {
		err := provision(ctx, events.ConsumerSpec{Name: name, Filter: filter})
		if errcode.Of(err) != errcode.PermissionDenied {
			t.Errorf("filter %s: %v, want permission_denied", filter, err)
		}
	}
	_, _, all, allName := f.auditor(t, "aud-all")
	if err := all(ctx, events.ConsumerSpec{Name: allName, Filter: "sbx.evt.>"}); err != nil {
		t.Fatalf("an auditor of every tenant: %v", err)
	}
}

// TestAuditFeedRefusesBadRequests: a request with a member the engine does
// not know (a deliver subject), no version it speaks, or an answer wanted
// outside an inbox is refused; the engine never answers onto a subject an
// auditor chose.
func TestAuditFeedRefusesBadRequests(t *testing.T) {
	f := startFeed(t)
	aud, _, _, _ := f.auditor(t, "aud-acme")
	subj := commands.Subjects{}.AuditConsumer("aud-acme", "acme")
	for _, c := range []struct{ body, want string }{
		{`{"version":"1.4","args":{"filter":"sbx.evt.acme.>","deliver_subject":"sbx.node.n1.cordon"}}`, "invalid_request"},
		{`{"version":"1.4","deliver_subject":"sbx.node.n1.cordon","args":{"filter":"sbx.evt.acme.>"}}`, "invalid_request"},
		{`{"version":"1.99","args":{"filter":"sbx.evt.acme.>","deliver_subject":"x"}}`, "invalid_request"},
		{`{"version":"1.4","args":{}}`, "invalid_request"},
		{`{"type":"io.nats.jetstream.api.v1.consumer_info_response"}`, "invalid_request"},
	} {
		m, err := aud.Request(subj, []byte(c.body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep commands.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error == nil || string(rep.Error.Code) != c.want {
			t.Fatalf("%s: reply %s, want %s", c.body, m.Data, c.want)
		}
	}
	// An answer aimed at a node's subject is never sent.
	watch, err := f.engine.SubscribeSync("sbx.node.n1.cordon")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.engine.Flush(); err != nil {
		t.Fatal(err)
	}
	aimed := nats.NewMsg(subj)
	aimed.Reply = "sbx.node.n1.cordon"
	aimed.Data = []byte(`{"version":"1.4","args":{"filter":"sbx.evt.acme.>"}}`)
	if err := aud.PublishMsg(aimed); err != nil {
		t.Fatal(err)
	}
	// The service answers in order: once the next request is answered,
	// the aimed one was handled, and whatever it sent the watcher has.
	if _, err := aud.Request(subj, aimed.Data, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := f.engine.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := watch.Pending(); n != 0 {
		m, _ := watch.NextMsg(time.Second)
		t.Fatalf("the engine answered onto sbx.node.n1.cordon: %s", m.Data)
	}
}

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		filter, pattern string
		want            bool
	}{
		{"sbx.evt.acme.>", "sbx.evt.acme.>", true},
		{"sbx.evt.acme.*.*.*", "sbx.evt.acme.>", true},
		{"sbx.evt.acme.s1.exec.start", "sbx.evt.acme.>", true},
		{"sbx.evt.acme", "sbx.evt.acme.>", false},
		{"sbx.evt.*.>", "sbx.evt.acme.>", false},
		{"sbx.evt.>", "sbx.evt.acme.>", false},
		{"sbx.evt.acme2.>", "sbx.evt.acme.>", false},
		{">", "sbx.evt.>", false},
		{"sbx.evt..x", "sbx.evt.>", false},
		{"sbx.nodeevt.n1.registered", "sbx.nodeevt.>", true},
		{"sbx.a.b", "sbx.*.b", true},
		{"sbx.*.b", "sbx.*.b", true},
		{"sbx.a.b.c", "sbx.*.b", false},
		{"sbx.>", "sbx.*", false},
	} {
		if got := auditfeed.Within(c.filter, c.pattern); got != c.want {
			t.Errorf("Within(%q, %q) = %v, want %v", c.filter, c.pattern, got, c.want)
		}
	}
}
