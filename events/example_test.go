package events_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A third-party auditor needs nothing of Paddock but nats.go: a durable
// consumer on SBX_EVENTS that checks each session's prev_hash chain and
// acknowledges what it recorded (docs/architecture.md, "Projections and
// audit", shows the same code).
func Example_thirdPartyAuditor() {
	ctx := context.Background()
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cons, err := js.CreateOrUpdateConsumer(ctx, "SBX_EVENTS", jetstream.ConsumerConfig{
		Durable:       "my-auditor",
		AckPolicy:     jetstream.AckExplicitPolicy,
		FilterSubject: "sbx.evt.acme.>", // tenant acme; sbx.evt.<tenant>.<session>.<op>.<phase>
	})
	if err != nil {
		return
	}
	prev := map[string]string{} // session -> sha256 of its last stored event
	cc, _ := cons.Consume(func(m jetstream.Msg) {
		var ev struct {
			SessionID string `json:"session_id"`
			Seq       uint64 `json:"seq"`
			Op        string `json:"op"`
			Phase     string `json:"phase"`
			OK        *bool  `json:"ok"`
			PrevHash  string `json:"prev_hash"`
		}
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			log.Printf("not an event on %s: %v", m.Subject(), err)
			_ = m.Term() // do not get it again
			return
		}
		if h, seen := prev[ev.SessionID]; seen && ev.PrevHash != h {
			log.Printf("session %s seq %d: prev_hash chain broken", ev.SessionID, ev.Seq)
		}
		sum := sha256.Sum256(m.Data())
		prev[ev.SessionID] = hex.EncodeToString(sum[:])
		// ... record ev ...
		_ = m.Ack() // the server keeps my-auditor's position
	})
	defer cc.Stop()
}
