package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auditfeed"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// serveWithIdentities starts `engine serve` (auth on, node n1, local
// runtime) on an auth store made beforehand with the hostile-tenant
// identities, an auditor of tenant evil and a second node identity n2, so
// that no reload runs while the test connects.
func serveWithIdentities(t *testing.T) (string, *auth.Store) {
	t.Helper()
	dir := t.TempDir()
	st := auth.Open(auth.DirIn(dir))
	for _, id := range [][3]string{
		{"engine", "engine", ""}, {"admin", "admin", ""}, {"client-default", "client", "default"},
		{"aud-evil", "auditor", "evil"}, {"n2", "node", ""},
	} {
		if _, err := st.Add(id[0], auth.Role(id[1]), id[2]); err != nil {
			t.Fatal(err)
		}
	}
	addIdentities(t, st)
	url, _ := serveFor(t, "--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local")
	return url, st
}

// pushConsumer asks JetStream, on conn, for a push consumer of SBX_EVENTS
// that delivers filter onto deliver; it returns the server's answer, or
// the error of a request the server refused (no answer).
func pushConsumer(conn *nats.Conn, name, filter, deliver string) (*nats.Msg, error) {
	body := fmt.Sprintf(`{"stream_name":"SBX_EVENTS","config":{"name":%q,"deliver_subject":%q,"filter_subject":%q,"ack_policy":"none","deliver_policy":"all"}}`, name, deliver, filter)
	return conn.Request("$JS.API.CONSUMER.CREATE.SBX_EVENTS."+name+"."+filter, []byte(body), 2*time.Second)
}

// watchSubject counts what arrives on subj (seen by conn, which may
// subscribe to it).
func watchSubject(t *testing.T, conn *nats.Conn, subj string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := conn.Subscribe(subj, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// cordonEvents returns node's cordoned node events.
func cordonEvents(t *testing.T, js jetstream.JetStream, node string) []events.NodeEvent {
	t.Helper()
	var out []events.NodeEvent
	log := events.NewLog(js, "", "")
	err := log.Read(testenv.Context(t, 10*time.Second), events.ReadOptions{Filters: []string{log.Subjects().Node(node, "cordoned")}}, func(m events.Msg) error {
		ev, err := events.ParseNode(m.Data)
		if err != nil {
			return err
		}
		out = append(out, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantOneCordon cordons node as the CLI (the barrier: every delivery the
// node got on its cordon subject came before it), then requires exactly
// one cordoned event, naming actor: nothing before it cordoned the node.
func wantOneCordon(t *testing.T, url string, cordonAs []string, js jetstream.JetStream, node, actor string) {
	t.Helper()
	if code, _, errs := cli(t, url, "", append(cordonAs, "node", "cordon", node)...); code != 0 {
		t.Fatalf("operator's cordon: exit %d: %s", code, errs)
	}
	evs := cordonEvents(t, js, node)
	if len(evs) != 1 || evs[0].Actor != actor {
		t.Fatalf("node %s's cordoned events: %+v; want one, by %s", node, evs, actor)
	}
	if code, _, errs := cli(t, url, "", append(cordonAs, "node", "uncordon", node)...); code != 0 {
		t.Fatalf("operator's uncordon: exit %d: %s", code, errs)
	}
}

// TestNoActingOnDeliveries is issue 23's attack, run for real with auth
// on: a read-only auditor of tenant evil, and a node identity, try to make
// JetStream deliver onto node n1's cordon subject (a push consumer's
// deliver subject, a pull's or a direct get's reply subject, a JetStream
// API response), with a body that is a valid cordon request and a forged
// stamp. The auditor's consumer create is refused by the server; what
// JetStream delivers, the node drops. n1 is never cordoned, other
// tenants' creates never get no_capacity, and the one cordon the node
// records is the operator's, naming its key.
func TestNoActingOnDeliveries(t *testing.T) {
	url, st := serveWithIdentities(t)
	admin := testenv.ConnectAs(t, url, st.CredsPath("admin"))
	adminCreds, _ := auth.LoadCreds(st.CredsPath("admin"))
	ajs := testenv.JetStream(t, admin.Conn)
	arrived := watchSubject(t, admin.Conn, "sbx.node.n1.cordon")
	// Tenant evil has events for its auditor to push.
	if code, _, errs := as(t, st, "mallory", url, "sandbox", "create"); code != 0 {
		t.Fatalf("mallory's create: %s", errs)
	}

	// The auditor's push consumer onto n1's cordon subject: refused by the
	// server (an auditor may create no consumer).
	aud := testenv.ConnectAs(t, url, st.CredsPath("aud-evil"))
	if m, err := pushConsumer(aud.Conn, "audit_aud-evil", "sbx.evt.evil.>", "sbx.node.n1.cordon"); err == nil {
		if !strings.Contains(string(m.Data), `"error"`) {
			// The old permissions: wait for what it pushes.
			testenv.Eventually(t, 10*time.Second, func() error {
				if arrived.Load() == 0 {
					return fmt.Errorf("nothing delivered yet")
				}
				return nil
			})
		}
	} else {
		aud.WantViolation(t, "$JS.API.CONSUMER.CREATE.SBX_EVENTS.audit_aud-evil.sbx.evt.evil.>")
	}
	if code, _, errs := as(t, st, "alice", url, "sandbox", "create"); code != 0 {
		t.Fatalf("alice's create after the auditor's push consumer: exit %d: %s", code, errs)
	}

	// The auditor's own pull consumer, pulled with n1's cordon subject as
	// the reply: JetStream delivers there, the node drops it.
	before := arrived.Load()
	ctx := testenv.Context(t, 20*time.Second)
	provision := auditfeed.Provisioner(aud.Conn, "", "aud-evil", "evil")
	if err := provision(ctx, events.ConsumerSpec{Name: "audit_aud-evil", Filter: "sbx.evt.evil.>"}); err != nil {
		t.Fatal(err)
	}
	pull := nats.NewMsg("$JS.API.CONSUMER.MSG.NEXT.SBX_EVENTS.audit_aud-evil")
	pull.Reply, pull.Data = "sbx.node.n1.cordon", []byte(`{"batch":3,"no_wait":true}`)
	if err := aud.PublishMsg(pull); err != nil {
		t.Fatal(err)
	}

	// Node n2 writes a valid cordon request with a forged stamp into the
	// stream, then has JetStream hand it to n1: a push consumer (its
	// permissions allow consumers on the events stream), a direct get and a
	// stream info aimed at n1's cordon subject.
	n2 := testenv.ConnectAs(t, url, st.CredsPath("n2"))
	n2js := testenv.JetStream(t, n2.Conn)
	forged := nats.NewMsg("sbx.evt.evil.forged.exec.start")
	forged.Header.Set(auth.RequestInfoHeader, `{"acc":"PADDOCK","user":"`+adminCreds.PublicKey+`"}`)
	forged.Data = []byte(`{"version":"` + commands.Version + `","actor":"n2"}`)
	if _, err := n2js.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	if m, err := pushConsumer(n2.Conn, "n2push", "sbx.evt.evil.forged.>", "sbx.node.n1.cordon"); err != nil || strings.Contains(string(m.Data), `"error"`) {
		t.Fatalf("node n2's push consumer: %v %s (the attack needs it made)", err, m.Data)
	}
	// The same body, unstamped, is a valid create: pushed onto the
	// scheduler's create subject of tenant acme (a pushed message keeps
	// its stream subject), or answered there by a direct get (which takes
	// the reply subject), it must make no session there.
	if _, err := n2js.Publish(ctx, "sbx.evt.evil.plain.exec.start", forged.Data); err != nil {
		t.Fatal(err)
	}
	toScheduler := watchSubject(t, admin.Conn, "sbx.cmd.acme.create")
	if m, err := pushConsumer(n2.Conn, "n2sched", "sbx.evt.evil.plain.>", "sbx.cmd.acme.create"); err != nil || strings.Contains(string(m.Data), `"error"`) {
		t.Fatalf("node n2's push consumer onto the scheduler: %v %s", err, m.Data)
	}
	get := nats.NewMsg("$JS.API.DIRECT.GET.SBX_EVENTS")
	get.Reply, get.Data = "sbx.cmd.acme.create", []byte(`{"last_by_subj":"sbx.evt.evil.plain.exec.start"}`)
	if err := n2.PublishMsg(get); err != nil {
		t.Fatal(err)
	}
	for _, aim := range []struct{ subj, body string }{
		{"$JS.API.DIRECT.GET.SBX_EVENTS", `{"last_by_subj":"sbx.evt.evil.forged.exec.start"}`},
		{"$JS.API.STREAM.INFO.SBX_EVENTS", ``},
	} {
		m := nats.NewMsg(aim.subj)
		m.Reply, m.Data = "sbx.node.n1.cordon", []byte(aim.body)
		if err := n2.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// Each of them reached n1's cordon subject: pull (at least one),
	// push, direct get, stream info.
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := arrived.Load() - before; n < 4 {
			return fmt.Errorf("%d deliveries on n1's cordon subject so far, want 4", n)
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		if toScheduler.Load() < 2 {
			return fmt.Errorf("nothing delivered onto the scheduler's subject yet")
		}
		return nil
	})
	if code, _, errs := as(t, st, "alice", url, "sandbox", "create"); code != 0 {
		t.Fatalf("alice's create after the deliveries: exit %d: %s", code, errs)
	}
	// Tenant acme has alice's two sessions, and no session the delivery made.
	var creates int
	log := events.NewLog(ajs, "", "")
	if err := log.Read(ctx, events.ReadOptions{Filters: []string{log.Subjects().Filter("acme", "", "create")}}, func(m events.Msg) error {
		if strings.HasSuffix(m.Subject, ".start") {
			creates++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if creates != 2 {
		t.Fatalf("tenant acme has %d creates, want alice's 2", creates)
	}
	wantOneCordon(t, url, []string{"--creds", st.CredsPath("admin")}, ajs, "n1", adminCreds.PublicKey)
}

// TestOperatorSubjectsRefuse: on every subject that changes state, what an
// identity may not send is refused: by the server for an auditor, a node
// or a client (a violation, no answer); by the receiver, with its error
// code, for a sender in the PADDOCK account whose request is not a
// versioned one, or carries a stamp (a tenant's import). Node n1 is not
// cordoned by any of it.
func TestOperatorSubjectsRefuse(t *testing.T) {
	url, st := serveWithIdentities(t)
	stateful := []string{
		"sbx.node.n1.cordon", "sbx.node.n1.uncordon", "sbx.node.n1.release", "sbx.node.n1.create", "sbx.node.n1.resume",
		"sbx.nodehb.n1", "sbx.cmd.acme.create", "sbx.cmd.acme.resume", "sbx.cmd.acme.delete", "sbx.cmd.acme.upload",
	}
	for _, who := range []string{"aud-acme", "n2", "mallory"} {
		c := testenv.ConnectAs(t, url, st.CredsPath(who))
		for _, subj := range stateful {
			if err := c.Publish(subj, []byte(`{"version":"`+commands.Version+`"}`)); err != nil {
				t.Fatal(err)
			}
			if who == "mallory" && strings.HasPrefix(subj, "sbx.cmd.acme.") {
				// Not in mallory's account at all: it reaches nobody.
				continue
			}
			c.WantViolation(t, subj)
		}
	}

	eng := testenv.ConnectAs(t, url, st.CredsPath("engine"))
	v := commands.Version
	stamp := `{"acc":"evil","user":"UEVIL"}`
	for _, c := range []struct {
		subj, body, stamp, want string
	}{
		{"sbx.node.n1.cordon", ``, "", "invalid_request"},
		{"sbx.node.n1.cordon", `{}`, "", "invalid_request"},
		{"sbx.node.n1.cordon", `{"version":"` + v + `","deliver_subject":"x"}`, "", "invalid_request"},
		{"sbx.node.n1.cordon", `{"version":"1.99","deliver_subject":"x"}`, "", "invalid_request"},
		{"sbx.node.n1.cordon", `{"version":"` + v + `","args":{"x":1}}`, "", "invalid_request"},
		{"sbx.node.n1.cordon", `{"type":"io.nats.jetstream.api.v1.stream_info_response"}`, "", "invalid_request"},
		{"sbx.node.n1.cordon", `{"version":"` + v + `"}`, stamp, "permission_denied"},
		{"sbx.node.n1.uncordon", `{"version":"` + v + `"}`, stamp, "permission_denied"},
		{"sbx.node.n1.release", `{"version":"` + v + `","args":{"tenant":"acme","session_id":"s1"}}`, stamp, "permission_denied"},
		{"sbx.node.n1.release", `{"version":"` + v + `","args":{"tenant":"acme","session_id":"s1","all":true}}`, "", "invalid_request"},
		{"sbx.node.n1.create", `{"version":"` + v + `","args":{}}`, stamp, "permission_denied"},
		{"sbx.node.n1.resume", `{"version":"` + v + `","args":{}}`, stamp, "permission_denied"},
		{"sbx.cmd.acme.create", `{"version":"` + v + `","args":{}}`, stamp, "permission_denied"},
		{"sbx.cmd.acme.delete", `{"version":"` + v + `","args":{"session_id":"s1"}}`, stamp, "permission_denied"},
		{"sbx.cmd.acme.upload", `{"version":"` + v + `","args":{}}`, stamp, "permission_denied"},
	} {
		m := nats.NewMsg(c.subj)
		m.Data = []byte(c.body)
		if c.stamp != "" {
			m.Header.Set(auth.RequestInfoHeader, c.stamp)
		}
		r, err := eng.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", c.subj, c.body, err)
		}
		var rep commands.Reply
		if err := json.Unmarshal(r.Data, &rep); err != nil || rep.Error == nil || string(rep.Error.Code) != c.want {
			t.Fatalf("%s %s (stamp %q): reply %s, want %s", c.subj, c.body, c.stamp, r.Data, c.want)
		}
	}
	// A JetStream header on a request: it is no command, and gets no answer.
	m := nats.NewMsg("sbx.node.n1.cordon")
	m.Header.Set("Nats-Stream", "SBX_EVENTS")
	m.Data = []byte(`{"version":"` + v + `"}`)
	if r, err := eng.RequestMsg(m, 500*time.Millisecond); err == nil {
		t.Fatalf("a request with a Nats-Stream header was answered: %s", r.Data)
	}
	admin, _ := auth.LoadCreds(st.CredsPath("admin"))
	wantOneCordon(t, url, []string{"--creds", st.CredsPath("admin")}, testenv.JetStream(t, eng.Conn), "n1", admin.PublicKey)
}

// TestNoAuthDeliveryIsNoCommand: without auth there is no security
// boundary on the bus, but a JetStream delivery is still never taken for a
// command: a push consumer delivering a valid cordon request onto a
// node's cordon subject does not cordon it.
func TestNoAuthDeliveryIsNoCommand(t *testing.T) {
	dir := t.TempDir()
	url, _ := serveFor(t, "--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--no-auth")
	t.Setenv("PADDOCK_CREDS", "none")
	nc := testenv.Connect(t, url)
	js := testenv.JetStream(t, nc)
	arrived := watchSubject(t, nc, "sbx.node.n1.cordon")
	ctx := testenv.Context(t, 20*time.Second)
	if _, err := js.Publish(ctx, "sbx.evt.x.forged.exec.start", []byte(`{"version":"`+commands.Version+`"}`)); err != nil {
		t.Fatal(err)
	}
	if m, err := pushConsumer(nc, "push", "sbx.evt.x.forged.>", "sbx.node.n1.cordon"); err != nil || strings.Contains(string(m.Data), `"error"`) {
		t.Fatalf("push consumer: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if arrived.Load() == 0 {
			return fmt.Errorf("nothing delivered yet")
		}
		return nil
	})
	if code, _, errs := cli(t, url, "", "sandbox", "create"); code != 0 {
		t.Fatalf("create after the delivery: exit %d: %s", code, errs)
	}
	wantOneCordon(t, url, nil, js, "n1", "cli")
}
