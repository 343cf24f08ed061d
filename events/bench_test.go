package events_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/nats-io/nkeys"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkAppend measures guarded event appends as a node makes them (one
// session, each append waiting for its ack) with the durable default
// (fsync before every ack) and with a relaxed 1s sync interval.
//
//	go test -run '^$' -bench BenchmarkAppend -benchtime 2000x ./events/
func BenchmarkAppend(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  broker.Config
	}{
		{"sync=always", broker.Config{}},
		{"sync=1s", broker.Config{SyncInterval: time.Second}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := testenv.StartBrokerWith(b, tc.cfg)
			nc := testenv.Connect(b, srv.ClientURL())
			js := testenv.JetStream(b, nc)
			ctx := context.Background()
			if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
				b.Fatal(err)
			}
			log := events.NewLog(js, "", "")
			session := uuid.NewString()
			var last uint64
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				ev := &events.Event{
					Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
					Tenant: "bench", SessionID: session, Seq: uint64(i + 1), Op: "exec",
					Phase: events.PhaseStart, SpanID: fmt.Sprint(i),
				}
				seq, err := log.Append(ctx, ev, last)
				if err != nil {
					b.Fatal(err)
				}
				last = seq
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// BenchmarkSign measures what signing adds to an event: encoding and
// signing it with a node's key (ed25519), and verifying it as audit does.
//
//	go test -run '^$' -bench BenchmarkSign ./events/
func BenchmarkSign(b *testing.B) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		b.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	ev := &events.Event{
		Version: events.Version, EventID: uuid.NewString(), TS: time.Now().UTC(),
		Tenant: "bench", SessionID: uuid.NewString(), Seq: 7, Op: "exec",
		Phase: events.PhaseStart, SpanID: "0123456789abcdef", PrevHash: events.Hash([]byte("x")),
		Data: []byte(`{"argv":["true"],"timeout_ms":600000}`),
	}
	data, _ := json.Marshal(ev)
	b.Run("nkeys-sign", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := kp.Sign(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append-headers", func(b *testing.B) {
		// What Append adds: the signature headers, with the unwrapped key.
		log, err := events.NewLog(nil, "", "").Signed(kp)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			if _, err := log.SignatureHeader(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	sig, _ := kp.Sign(data)
	enc := base64.RawURLEncoding.EncodeToString(sig)
	b.Run("verify", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := events.VerifySignature(pub, enc, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
