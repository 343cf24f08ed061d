package broker_test

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/testenv"
)

func start(t *testing.T, cfg broker.Config) *broker.Broker {
	t.Helper()
	b, err := broker.Start(cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(b.Shutdown)
	return b
}

// TestConfigErrors: settings the server cannot run with are refused
// before anything starts.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		cfg  broker.Config
		want string
	}{
		{"empty store dir", broker.Config{Port: -1}, "store dir"},
		{"port below -1", broker.Config{StoreDir: dir, Port: -2}, "port -2"},
		{"port above 65535", broker.Config{StoreDir: dir, Port: 65536}, "port 65536"},
		{"negative sync interval", broker.Config{StoreDir: dir, Port: -1, SyncInterval: -time.Second}, "sync interval"},
		{"negative heal interval", broker.Config{StoreDir: dir, Port: -1, HealInterval: -time.Second}, "heal interval"},
		{"negative heal free space", broker.Config{StoreDir: dir, Port: -1, HealFree: -1}, "heal free"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := broker.Start(tc.cfg)
			if err == nil {
				b.Shutdown()
				t.Fatalf("Start(%+v) succeeded, want an error about %s", tc.cfg, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestPortTaken: a port another listener holds is an error that names
// the address.
func TestPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	b, err := broker.Start(broker.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: port, StartTimeout: time.Second})
	if err == nil {
		b.Shutdown()
		t.Fatalf("Start on taken port %d succeeded, want an error", port)
	}
	if addr := "127.0.0.1:" + strconv.Itoa(port); !strings.Contains(err.Error(), addr) {
		t.Fatalf("got %q, want it to name %s", err, addr)
	}
}

// TestServes: a broker on a free port takes TCP clients and in-process
// connections, both with JetStream, and messages cross between them.
func TestServes(t *testing.T) {
	dir := t.TempDir()
	b := start(t, broker.Config{StoreDir: dir, Host: "127.0.0.1", Port: -1})
	if name := b.Server().Name(); name != "paddock" {
		t.Errorf("server name %q, want paddock", name)
	}
	if !strings.HasPrefix(b.ClientURL(), "nats://127.0.0.1:") || strings.HasSuffix(b.ClientURL(), ":4222") {
		t.Errorf("client URL %q, want a free port on 127.0.0.1", b.ClientURL())
	}
	tcp := testenv.Connect(t, b.ClientURL())
	inproc, err := b.Connect(nats.Name("in-process"))
	if err != nil {
		t.Fatal(err)
	}
	defer inproc.Close()
	if inproc.ConnectedUrl() == tcp.ConnectedUrl() {
		t.Errorf("in-process connection is on %q, want not the TCP listener", inproc.ConnectedUrl())
	}
	ctx := testenv.Context(t, 20*time.Second)

	// JetStream on both: a stream made through one is read through the other.
	jsIn := testenv.JetStream(t, inproc)
	if _, err := jsIn.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	jsTCP := testenv.JetStream(t, tcp)
	if _, err := jsTCP.Publish(ctx, "t.1", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	s, err := jsIn.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, 1)
	if err != nil || string(m.Data) != "hello" {
		t.Fatalf("stored message = %v, %v; want hello", m, err)
	}
	if cfg := b.Server().JetStreamConfig(); cfg == nil || !strings.HasPrefix(cfg.StoreDir, dir) {
		t.Errorf("JetStream config %+v, want the store under %s", cfg, dir)
	}

	// Core NATS across the two kinds of connection.
	reply, err := inproc.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(append([]byte("re: "), m.Data...)) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reply.Unsubscribe() }()
	if err := inproc.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := tcp.RequestWithContext(ctx, "echo", []byte("ping"))
	if err != nil || string(r.Data) != "re: ping" {
		t.Fatalf("echo = %v, %v; want re: ping", r, err)
	}
}

// TestShutdownTwice: Shutdown is safe to call twice, and the server is
// gone after it.
func TestShutdownTwice(t *testing.T) {
	b, err := broker.Start(broker.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	url := b.ClientURL()
	b.Shutdown()
	done := make(chan struct{})
	go func() { b.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("second Shutdown did not return")
	}
	if b.Server().Running() {
		t.Error("server still running after Shutdown")
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.NoReconnect())
	if err == nil {
		nc.Close()
		t.Fatalf("connected to %s after Shutdown, want refused", url)
	}
}

// TestSync: SyncInterval 0 syncs every write; a positive interval
// syncs periodically instead.
func TestSync(t *testing.T) {
	cases := []struct {
		interval time.Duration
		always   bool
	}{
		{0, true},
		{time.Second, false},
		{250 * time.Millisecond, false},
	}
	for _, tc := range cases {
		t.Run(tc.interval.String(), func(t *testing.T) {
			b := start(t, broker.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1, SyncInterval: tc.interval})
			cfg := b.Server().JetStreamConfig()
			if cfg == nil {
				t.Fatal("JetStream is not enabled")
			}
			if cfg.SyncAlways != tc.always {
				t.Errorf("SyncAlways = %v, want %v", cfg.SyncAlways, tc.always)
			}
			if tc.interval > 0 && cfg.SyncInterval != tc.interval {
				t.Errorf("SyncInterval = %s, want %s", cfg.SyncInterval, tc.interval)
			}
		})
	}
}

// TestStoreSurvivesRestart: a broker started again on the same store
// directory has the streams of the last one.
func TestStoreSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := testenv.Context(t, 20*time.Second)
	for round := range 2 {
		b := start(t, broker.Config{StoreDir: dir, Host: "127.0.0.1", Port: -1})
		nc, err := b.Connect()
		if err != nil {
			t.Fatal(err)
		}
		js := testenv.JetStream(t, nc)
		if round == 0 {
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep"}}); err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, "keep", []byte("x")); err != nil {
				t.Fatal(err)
			}
		} else {
			s, err := js.Stream(ctx, "KEEP")
			if err != nil {
				t.Fatalf("stream after restart: %v", err)
			}
			if n := s.CachedInfo().State.Msgs; n != 1 {
				t.Fatalf("stream has %d messages after restart, want 1", n)
			}
		}
		nc.Close()
		b.Shutdown()
	}
}
