package events_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nkeys"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// TestSignedAppend: a signed log's events carry the signer's key and a
// signature over the stored bytes that verifies as read back, and fails on
// other bytes or under another key.
func TestSignedAppend(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	nc := testenv.Connect(t, testenv.StartBroker(t).ClientURL())
	js := testenv.JetStream(t, nc)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	log, err := events.NewLog(js, "", "").Signed(kp)
	if err != nil {
		t.Fatal(err)
	}
	if log.SigningKey() != pub {
		t.Fatalf("signing key %s, want %s", log.SigningKey(), pub)
	}
	ev := &events.Event{Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(), Tenant: "t",
		SessionID: "s", Seq: 1, Op: "create", Phase: events.PhaseStart, SpanID: "1"}
	if _, err := log.Append(ctx, ev, 0); err != nil {
		t.Fatal(err)
	}
	var got []events.Msg
	if err := log.Read(ctx, events.ReadOptions{}, func(m events.Msg) error { got = append(got, m); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Signer != pub {
		t.Fatalf("read %+v, want one event signed by %s", got, pub)
	}
	if err := got[0].VerifySignature(); err != nil {
		t.Fatal(err)
	}
	tail, err := log.Last(ctx, "t", "s")
	if err != nil || !tail.Signed || tail.Signer != pub {
		t.Fatalf("tail %+v, %v: want signed by %s", tail, err, pub)
	}
	// The leader's read of the tail (the JetStream API's message get, its
	// headers decoded from the raw block) says the same.
	lt, err := log.LastFromLeader(ctx, "t", "s")
	if err != nil || !lt.Signed || lt.Signer != pub || lt.StreamSeq != tail.StreamSeq || lt.Hash != tail.Hash || lt.Event.EventID != ev.EventID {
		t.Fatalf("tail from the leader %+v, %v: want %+v", lt, err, tail)
	}
	if none, err := log.LastFromLeader(ctx, "t", "nobody"); err != nil || none.Event != nil {
		t.Fatalf("tail of a session with no events, from the leader: %+v, %v; want none", none, err)
	}
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	for name, m := range map[string]events.Msg{
		"other bytes": {Signer: pub, Sig: got[0].Sig, Data: append([]byte(" "), got[0].Data...)},
		"other key":   {Signer: otherPub, Sig: got[0].Sig, Data: got[0].Data},
		"not base64":  {Signer: pub, Sig: "!!", Data: got[0].Data},
		"not a key":   {Signer: "SUAXXX", Sig: got[0].Sig, Data: got[0].Data},
	} {
		if err := m.VerifySignature(); !errors.Is(err, events.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	if err := (events.Msg{Data: got[0].Data}).VerifySignature(); !errors.Is(err, events.ErrUnsigned) {
		t.Errorf("no headers: %v, want ErrUnsigned", err)
	}
}
