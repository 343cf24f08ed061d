package broker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/testenv"
)

// publish publishes data on subj with a short bound: a file store that
// failed a write never answers.
func publish(ctx context.Context, js jetstream.JetStream, subj string, data []byte) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return js.Publish(ctx, subj, data)
}

// TestHealsFullDisk: with the store's filesystem full, writes fail, and
// keep failing while it stays full (nats-server's file store keeps its
// write error); once space is freed, the broker restarts JetStream by
// itself, writes succeed again on the same connection, and every write
// that was acknowledged is in the stream. The server's log comes through
// the broker's logger, its errors at ERROR with component=nats-server.
func TestHealsFullDisk(t *testing.T) {
	dir := testenv.Tmpfs(t, 24<<20)
	var logs testenv.SyncBuffer
	b := start(t, broker.Config{
		StoreDir: filepath.Join(dir, "store"), Host: "127.0.0.1", Port: -1,
		// JetStream's own accounting must not refuse first: the disk does.
		MaxStore:     1 << 30,
		HealInterval: 50 * time.Millisecond, HealFree: 4 << 20,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	nc, err := b.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js := testenv.JetStream(t, nc)
	ctx := testenv.Context(t, 2*time.Minute)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]string{}
	n := 0
	pub := func() error {
		n++
		data := fmt.Sprintf("msg-%d-%s", n, strings.Repeat("x", 500))
		ack, err := publish(ctx, js, "s", []byte(data))
		if err == nil {
			acked[ack.Sequence] = data
		}
		return err
	}
	for range 20 {
		if err := pub(); err != nil {
			t.Fatal(err)
		}
	}

	ballast := filepath.Join(dir, "ballast")
	testenv.Fill(t, ballast)
	var failed error
	for range 10_000 {
		if failed = pub(); failed != nil {
			break
		}
	}
	if failed == nil {
		t.Fatal("10000 writes to a full filesystem succeeded")
	}
	t.Logf("%d writes acknowledged, then: %v", len(acked), failed)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "component=nats-server") || !strings.Contains(logs.String(), "level=ERROR") {
			return fmt.Errorf("no ERROR line of component=nats-server yet")
		}
		return nil
	})
	if err := pub(); err == nil {
		t.Fatal("a write to the still full filesystem succeeded")
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	testenv.Eventually(t, 30*time.Second, pub)
	t.Logf("writes succeed again %s after the space was freed, after %d JetStream restarts", time.Since(freed).Round(time.Millisecond), b.Heals())
	if b.Heals() < 1 {
		t.Errorf("Heals() = %d, want at least 1", b.Heals())
	}
	for range 5 {
		if err := pub(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	for seq, want := range acked {
		m, err := s.GetMsg(ctx, seq)
		if err != nil || string(m.Data) != want {
			t.Fatalf("acknowledged message %d: %v; want it in the stream", seq, err)
		}
	}
	if got := s.CachedInfo().State.Msgs; got < uint64(len(acked)) {
		t.Errorf("stream holds %d messages, %d were acknowledged", got, len(acked))
	}
}
