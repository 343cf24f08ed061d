package runtimes

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestIsLoopback(t *testing.T) {
	for in, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:4222": true, "127.3.2.1": true, "localhost:4222": true, "[::1]:4222": true, "::1": true,
		"0.0.0.0:4222": false, "10.0.0.5:4222": false, "example.com": false, ":4222": false, "": false,
	} {
		if got := IsLoopback(in); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", in, got, want)
		}
	}
	for in, want := range map[string]bool{
		"nats://127.0.0.1:4222": true, "nats://localhost:4222,nats://127.0.0.2:4223": true,
		"nats://127.0.0.1:4222,nats://10.1.1.1:4222": false, "tls://nats.example.com:4222": false, "::bad": false,
	} {
		if got := URLIsLoopback(in); got != want {
			t.Errorf("URLIsLoopback(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestAutoFailsClosed: auto never runs sandboxes on the local runtime
// where Docker is configured but does not answer, nor where the
// deployment reaches beyond this machine; it picks local only on a host
// without Docker and a loopback deployment, and local named is local.
func TestAutoFailsClosed(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	base := Options{Node: "n1", LocalDir: t.TempDir(), PingTimeout: 200 * time.Millisecond, DockerWait: 1500 * time.Millisecond}
	yes, no := func() bool { return true }, func() bool { return false }

	t.Setenv("DOCKER_HOST", "tcp://127.0.0.1:1") // nothing listens there
	o := base
	o.Mode, o.DockerPresent, o.Loopback = "auto", yes, true
	var logged strings.Builder
	if _, _, err := Open(t.Context(), o, slog.New(slog.NewTextHandler(&logged, nil))); err == nil || !strings.Contains(err.Error(), "not falling back") {
		t.Fatalf("auto with a silent Docker daemon: got %v, want a refusal to fall back", err)
	}
	if !strings.Contains(logged.String(), "waiting for it") {
		t.Fatalf("auto gave up on Docker without asking again; log:\n%s", logged.String())
	}

	o.DockerPresent, o.Loopback = no, false
	if _, _, err := Open(t.Context(), o, logger); err == nil || !strings.Contains(err.Error(), "--runtime local") {
		t.Fatalf("auto without Docker on a non-loopback deployment: got %v, want a refusal that names --runtime local", err)
	}

	o.Loopback = true
	rts, closeAll, err := Open(t.Context(), o, logger)
	if err != nil || len(rts) != 1 || rts[0].Name() != "local" {
		t.Fatalf("auto without Docker on loopback: %v, %v; want local", rts, err)
	}
	_ = closeAll()

	o.Mode, o.Loopback = "local", false
	if rts, _, err := Open(t.Context(), o, logger); err != nil || rts[0].Name() != "local" {
		t.Fatalf("local named on a non-loopback deployment: %v, %v; want local (named, so allowed)", rts, err)
	}

	o.Mode = "docker"
	if _, _, err := Open(t.Context(), o, logger); err == nil {
		t.Fatal("docker with a silent daemon: opened, want an error")
	}
	if err := Check("vm"); err == nil {
		t.Fatal(`Check("vm") passed`)
	}
}
