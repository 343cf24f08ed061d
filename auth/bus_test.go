package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/testenv"
)

// bus is an auth store with one identity of each kind, served by an
// embedded server that loads it.
type bus struct {
	st  *auth.Store
	url string
	ids map[string]*auth.Creds
}

func startBus(t *testing.T) *bus {
	t.Helper()
	st := auth.Open(t.TempDir())
	b := &bus{st: st, ids: map[string]*auth.Creds{}}
	for _, id := range []struct {
		name   string
		role   auth.Role
		tenant string
	}{
		{"engine", auth.RoleEngine, ""},
		{"n1", auth.RoleNode, ""}, {"n2", auth.RoleNode, ""},
		{"alice", auth.RoleClient, "acme"}, {"alice2", auth.RoleClient, "acme"},
		{"mallory", auth.RoleClient, "evil"},
		{"aud-acme", auth.RoleAuditor, "acme"},
	} {
		c, err := st.Add(id.name, id.role, id.tenant)
		if err != nil {
			t.Fatal(err)
		}
		b.ids[id.name] = c
	}
	b.url = testenv.StartAuthBroker(t, st).ClientURL()
	return b
}

func (b *bus) conn(t *testing.T, name string) *testenv.Conn {
	t.Helper()
	return testenv.ConnectAs(t, b.url, b.st.CredsPath(name))
}

// echo serves sbx.cmd.> in the PADDOCK account, answering each request
// with the caller the server vouched for.
func (b *bus) echo(t *testing.T) {
	t.Helper()
	eng := b.conn(t, "engine")
	sub, err := eng.Subscribe("sbx.cmd.>", func(m *nats.Msg) {
		c, err := auth.CallerOf(m)
		if err != nil {
			_ = m.Respond([]byte(`{"error":"` + err.Error() + `"}`))
			return
		}
		out, _ := json.Marshal(c)
		_ = m.Respond(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := eng.Flush(); err != nil {
		t.Fatal(err)
	}
}

func caller(t *testing.T, m *nats.Msg) auth.Caller {
	t.Helper()
	var c auth.Caller
	if err := json.Unmarshal(m.Data, &c); err != nil {
		t.Fatalf("reply %q: %v", m.Data, err)
	}
	return c
}

// TestTenantIsTheAccount: the server stamps a client's command with its
// account and user; a stamp the client forges is replaced.
func TestTenantIsTheAccount(t *testing.T) {
	b := startBus(t)
	b.echo(t)
	alice := b.conn(t, "alice")
	m, err := alice.Request("sbx.cmd.acme.s1.exec", []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := caller(t, m); got.Account != "acme" || got.User != b.ids["alice"].PublicKey {
		t.Fatalf("caller %+v, want acme/%s", got, b.ids["alice"].PublicKey)
	}

	forged := nats.NewMsg("sbx.cmd.acme.s1.exec")
	forged.Header.Set(auth.RequestInfoHeader, `{"acc":"evil","user":"UFORGED"}`)
	forged.Data = []byte(`{}`)
	m, err = alice.RequestMsg(forged, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := caller(t, m); got.Account != "acme" || got.User != b.ids["alice"].PublicKey {
		t.Fatalf("forged stamp survived: caller %+v", got)
	}
}

// TestNKeyFileConnects: the <name>.nk file is usable by nats.go's own
// nkey option, and the connection is the identity the store issued, with
// its tenant's rights (and no more: its inbox prefix is still its own).
func TestNKeyFileConnects(t *testing.T) {
	b := startBus(t)
	b.echo(t)
	opt, err := nats.NkeyOptionFromSeed(b.st.NKeyPath("alice"))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 16)
	nc, err := nats.Connect(b.url, opt, nats.CustomInboxPrefix(b.ids["alice"].InboxPrefix()),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatalf("connect with %s: %v", b.st.NKeyPath("alice"), err)
	}
	defer nc.Close()
	m, err := nc.Request("sbx.cmd.acme.s1.running", []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := caller(t, m); got.Account != "acme" || got.User != b.ids["alice"].PublicKey {
		t.Fatalf("caller %+v, want acme/%s", got, b.ids["alice"].PublicKey)
	}
	// Another tenant's subject is not alice's, whichever file she uses.
	if err := nc.Publish("sbx.evt.acme.s1.exec.start", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("async error %v, want a permission violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("publishing on an events subject with alice's nkey drew no permission violation")
	}
	// A revoked identity's nkey file is gone with its credentials.
	if err := b.st.Remove("alice2"); err != nil {
		t.Fatal(err)
	}
	if _, err := nats.NkeyOptionFromSeed(b.st.NKeyPath("alice2")); err == nil {
		t.Fatal("a revoked identity's nkey file still loads")
	}
}

// TestClientConfinedToItsTenant: a client can neither command another
// tenant, nor read anyone's replies, nor touch events.
func TestClientConfinedToItsTenant(t *testing.T) {
	b := startBus(t)
	b.echo(t)
	mallory := b.conn(t, "mallory")
	// Another tenant's subjects do not exist in mallory's account.
	if _, err := mallory.Request("sbx.cmd.acme.s1.exec", []byte(`{}`), time.Second); err == nil {
		t.Fatal("mallory's command on tenant acme's subject was answered")
	}
	mallory.WantViolation(t, "sbx.cmd.acme.s1.exec")
	for _, subj := range []string{"sbx.>", "_INBOX.>", b.ids["alice"].InboxPrefix() + ".>", "sbx.evt.acme.>"} {
		if _, err := mallory.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		mallory.WantViolation(t, subj)
	}
	if err := mallory.Publish("sbx.evt.evil.s1.exec.start", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	mallory.WantViolation(t, "sbx.evt.evil.s1.exec.start")
	// A tenant account has no JetStream: no stream, KV or object store.
	js, _ := jetstream.New(mallory.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, "SBX_EVENTS"); err == nil {
		t.Fatal("a client reached the events stream")
	}

	// Two identities of one tenant do not see each other's replies.
	alice2 := b.conn(t, "alice2")
	if _, err := alice2.SubscribeSync(b.ids["alice"].InboxPrefix() + ".>"); err != nil {
		t.Fatal(err)
	}
	alice2.WantViolation(t, b.ids["alice"].InboxPrefix()+".>")
}

// TestNodeConfinedToItsSubjects: a node cannot receive another node's
// placements, speak as another node, or send commands.
func TestNodeConfinedToItsSubjects(t *testing.T) {
	b := startBus(t)
	n1 := b.conn(t, "n1")
	for _, subj := range []string{"sbx.node.n2.create", "sbx.node.>", "sbx.cmd.acme.create", "sbx.>"} {
		if _, err := n1.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		n1.WantViolation(t, subj)
	}
	for _, subj := range []string{"sbx.nodeevt.n2.registered", "sbx.nodehb.n2", "sbx.cmd.acme.create", "sbx.node.n2.create", "$KV.sbx_sessions.x"} {
		if err := n1.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		n1.WantViolation(t, subj)
	}
	// What it needs works: its own subjects.
	sub, err := n1.SubscribeSync("sbx.node.n1.create")
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := b.conn(t, "engine").Publish("sbx.node.n1.create", []byte(`x`)); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("node n1 did not get its own placement: %v", err)
	}
}

// TestAuditorConfinedToItsTenant: an auditor creates no consumer at all
// (a create's body could name a deliver subject), and reads its tenant's
// events through the pull consumer the engine made for it, nothing else.
func TestAuditorConfinedToItsTenant(t *testing.T) {
	b := startBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ejs, _ := jetstream.New(b.conn(t, "engine").Conn)
	if _, err := ejs.CreateStream(ctx, jetstream.StreamConfig{Name: "SBX_EVENTS", Subjects: []string{"sbx.evt.>", "sbx.nodeevt.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"sbx.evt.acme.s1.exec.start", "sbx.evt.evil.s2.exec.start"} {
		if _, err := ejs.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	aud := b.conn(t, "aud-acme")
	name := b.ids["aud-acme"].Consumer()
	// Every consumer create, its own included, on every API subject that
	// makes one: no answer, a violation.
	for _, subj := range []string{
		"$JS.API.CONSUMER.CREATE.SBX_EVENTS." + name + ".sbx.evt.acme.>",
		"$JS.API.CONSUMER.CREATE.SBX_EVENTS." + name + ".sbx.nodeevt.>",
		"$JS.API.CONSUMER.CREATE.SBX_EVENTS." + name,
		"$JS.API.CONSUMER.CREATE.SBX_EVENTS",
		"$JS.API.CONSUMER.DURABLE.CREATE.SBX_EVENTS." + name,
		"$JS.API.CONSUMER.CREATE.SBX_EVENTS.projector.sbx.evt.acme.>",
	} {
		body := `{"stream_name":"SBX_EVENTS","config":{"name":"` + name + `","deliver_subject":"sbx.node.n1.cordon","filter_subject":"sbx.evt.acme.>"}}`
		if _, err := aud.Request(subj, []byte(body), 500*time.Millisecond); err == nil {
			t.Fatalf("auditor's consumer create on %s was answered", subj)
		}
		aud.WantViolation(t, subj)
	}
	// The engine makes it (package auditfeed does, on request).
	if _, err := ejs.CreateOrUpdateConsumer(ctx, "SBX_EVENTS", jetstream.ConsumerConfig{Name: name, FilterSubject: "sbx.evt.acme.>", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(aud.Conn)
	cons, err := js.Consumer(ctx, "SBX_EVENTS", name)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || msg.Subject() != "sbx.evt.acme.s1.exec.start" {
		t.Fatalf("auditor read %v, %v; want its tenant's event", msg, err)
	}
	// Another's consumer, and any publish but its own requests: refused.
	if _, err := ejs.CreateOrUpdateConsumer(ctx, "SBX_EVENTS", jetstream.ConsumerConfig{Name: "other", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"$JS.API.CONSUMER.MSG.NEXT.SBX_EVENTS.other", "$JS.API.CONSUMER.INFO.SBX_EVENTS.other", "sbx.evt.acme.s1.exec.finish", "sbx.audit.someone.acme.consumer", "sbx.node.n1.cordon"} {
		if err := aud.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		aud.WantViolation(t, subj)
	}
}

// TestNodeJetStreamConfined: a node reaches the events stream and the
// snapshots' object store as a node uses them, and no other stream, no
// durable consumer, no stream or account management.
func TestNodeJetStreamConfined(t *testing.T) {
	b := startBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ejs, _ := jetstream.New(b.conn(t, "engine").Conn)
	if _, err := ejs.CreateStream(ctx, jetstream.StreamConfig{Name: "SBX_EVENTS", Subjects: []string{"sbx.evt.>", "sbx.nodeevt.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ejs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sbx_sessions"}); err != nil {
		t.Fatal(err)
	}
	n1 := b.conn(t, "n1")
	js, _ := jetstream.New(n1.Conn)
	// What a node does: append, read its history through an ordered
	// consumer.
	if _, err := js.Publish(ctx, "sbx.evt.acme.s1.exec.start", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	oc, err := js.OrderedConsumer(ctx, "SBX_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"sbx.evt.acme.s1.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatalf("node's history read: %v", err)
	}
	for _, subj := range []string{
		"$JS.API.CONSUMER.CREATE.KV_sbx_sessions",
		"$JS.API.CONSUMER.DURABLE.CREATE.SBX_EVENTS.x",
		"$JS.API.STREAM.INFO.KV_sbx_sessions",
		"$JS.API.DIRECT.GET.KV_sbx_sessions",
		"$JS.API.STREAM.CREATE.OBJ_sbx_workspaces",
		"$JS.API.STREAM.PURGE.SBX_EVENTS",
		"$JS.API.STREAM.NAMES",
		"$JS.API.ACCOUNT.PURGE.PADDOCK",
	} {
		if err := n1.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		n1.WantViolation(t, subj)
	}
}

// TestUnknownRefused: no credentials and a key the store never issued are
// refused (a removed identity: TestReloadAddsTenant).
func TestUnknownRefused(t *testing.T) {
	b := startBus(t)
	if _, err := testenv.DialAs(b.url, ""); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("no credentials: %v, want an authorization violation", err)
	}
	other := auth.Open(t.TempDir())
	if _, err := other.Add("stranger", auth.RoleAdmin, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.DialAs(b.url, other.CredsPath("stranger")); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a stranger's key: %v, want an authorization violation", err)
	}
}
