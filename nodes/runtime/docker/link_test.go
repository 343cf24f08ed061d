package docker

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestLinkAcceptRate: a sandbox that dials its socket again and again gets
// at most the burst and then acceptRate connections a second accepted;
// the rest wait in the backlog and cost the node nothing.
func TestLinkAcceptRate(t *testing.T) {
	dir, err := newLinkDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, err := listen(dir, func(context.Context) error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.remove()
	start := time.Now()
	for range 60 {
		nc, err := net.DialTimeout("unix", filepath.Join(dir, socketName), 50*time.Millisecond)
		if err == nil {
			nc.Close()
		}
	}
	// The accept loop runs on its own: wait until it has taken some, then
	// bound what it took by the time that has passed.
	var stats linkStats
	deadline := time.Now().Add(10 * time.Second)
	for stats.Accepted == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
		stats, _ = l.snapshot()
	}
	elapsed := time.Since(start)
	if stats.Accepted == 0 {
		t.Fatal("no connection accepted within 10s")
	}
	if max := acceptBurst + int(float64(acceptRate)*elapsed.Seconds()) + 1; stats.Accepted > max {
		t.Errorf("%d connections accepted in %s; at most %d may be", stats.Accepted, elapsed, max)
	}
}
