package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// TestBadMetricsFlags: a bad or non-loopback --metrics-addr is refused
// with invalid_request before the node connects.
func TestBadMetricsFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--metrics-addr", "nonsense"},
		{"--metrics-addr", "0.0.0.0:9464"},
		{"--metrics-allow-remote"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, append(args, "--nats-url", "nats://127.0.0.1:1"), &testWriter{t})
		cancel()
		if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), "metrics") {
			t.Errorf("agent-node %v = %v, want invalid_request about the metrics flags", args, err)
		}
	}
}
