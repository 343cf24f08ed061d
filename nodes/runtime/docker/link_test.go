package docker

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/testenv/wait"
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
	wait.Eventually(t, 10*time.Second, func() error {
		if stats, _ = l.snapshot(); stats.Accepted == 0 {
			return errors.New("no connection accepted yet")
		}
		return nil
	})
	elapsed := time.Since(start)
	if max := acceptBurst + int(float64(acceptRate)*elapsed.Seconds()) + 1; stats.Accepted > max {
		t.Errorf("%d connections accepted in %s; at most %d may be", stats.Accepted, elapsed, max)
	}
}
