package metricsflags

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/metrics"
	"github.com/paddock-dev/paddock/storage"
)

// WatchDisks reports the free space the disk watcher w last read in m
// (paddock_disk_free_bytes, paddock_disk_total_bytes). It does nothing
// for a nil m.
func WatchDisks(m *metrics.Metrics, w *storage.DiskWatcher) error {
	return m.WatchDisks(func() []metrics.Disk {
		ds := w.Disks()
		out := make([]metrics.Disk, 0, len(ds))
		for _, d := range ds {
			if d.Err == nil {
				out = append(out, metrics.Disk{Path: d.Path, Free: d.Free, Total: d.Total})
			}
		}
		return out
	})
}

// ReadyJetStream adds the "jetstream" readiness check to m: JetStream
// answers an account info request. It does nothing for a nil m.
func ReadyJetStream(m *metrics.Metrics, js jetstream.JetStream) {
	m.Ready().Add("jetstream", func(ctx context.Context) error {
		if _, err := js.AccountInfo(ctx); err != nil {
			return fmt.Errorf("jetstream unreachable: %w", err)
		}
		return nil
	})
}
