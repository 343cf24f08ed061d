package broker

import (
	"context"
	"time"

	"github.com/paddock-dev/paddock/storage"
)

// Healing a full disk. What nats-server 2.15 does when its filesystem is
// full (server/filestore.go, stream.go, jetstream.go, raft.go):
//
//   - a stream's file store that fails a write (ENOSPC) keeps the error
//     (fileStore.werr, and the stream's own) and fails every later write
//     with it, even once space is free again; a publish to it gets no
//     answer at all (the client times out);
//   - a clustered server's raft log that fails a write disables JetStream
//     on that server (handleOutOfSpace: ShutdownJetStream), for good;
//   - neither is ever undone but by restarting JetStream: closing every
//     stream and opening it again from its files, which a restart of the
//     server does and ShutdownJetStream then EnableJetStream does in
//     place, with the clients staying connected.
//
// So the broker watches for it: its logger sees each out-of-space error
// nats-server logs (a file store's "Critical write error", a raft write),
// and a JetStream that went off by itself counts too. Once the store's
// filesystem has HealFree bytes free again, the broker restarts JetStream
// in place. Every write that was acknowledged was synced to its block
// file before the ack (or within SyncInterval), so it is in the stream
// when the store is opened again; the write that failed was never
// acknowledged, and the store's recovery drops what of it reached the
// file. Clients see JetStream unavailable for the moment of the restart
// (their requests time out or fail and are retried); durable consumers
// come back from their files.

// needsHeal reports whether the broker's JetStream needs a restart: an
// out-of-space write error was logged since the last one, or JetStream,
// on at start, is off though the broker did not turn it off.
func (b *Broker) needsHeal() bool {
	if !b.jsOn {
		return false // nothing to restart
	}
	return b.outOfSpace.Load() || !b.ns.JetStreamEnabled()
}

// healGap is the least time between two restarts of JetStream, so that a
// store that fails for another reason too (a permission error, which also
// turns JetStream off) is not restarted in a tight loop.
const healGap = 10 * time.Second

// heal looks every HealInterval until ctx ends, and restarts JetStream
// when it needs it and space is back.
func (b *Broker) heal(ctx context.Context) {
	t := time.NewTicker(b.cfg.HealInterval)
	defer t.Stop()
	var waiting bool   // "waiting for space" was logged
	var last time.Time // the last restart
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !b.needsHeal() {
			waiting = false
			continue
		}
		d, err := storage.Stat(b.cfg.StoreDir, storage.Thresholds{})
		if err != nil || d.Free < uint64(b.cfg.HealFree) {
			if !waiting {
				b.logger.Warn("broker: JetStream's store is out of space; it restarts once the filesystem has space again", "store_dir", b.cfg.StoreDir, "free", d.Free, "needs", b.cfg.HealFree, "err", err)
				waiting = true
			}
			continue
		}
		waiting = false
		if time.Since(last) < healGap {
			continue
		}
		last = time.Now()
		b.restartJetStream(d.Free)
	}
}

// restartJetStream closes every stream and opens it again from its files
// (see the comment above). A restart that fails is tried again on the
// next look.
func (b *Broker) restartJetStream(free uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		return
	}
	b.outOfSpace.Store(false)
	b.logger.Warn("broker: restarting JetStream: its store failed to write for want of space, and space is free again", "store_dir", b.cfg.StoreDir, "free", free)
	start := time.Now()
	if b.ns.JetStreamEnabled() {
		if err := b.ns.ShutdownJetStream(); err != nil {
			b.logger.Error("broker: stopping JetStream failed; trying again", "err", err)
			b.outOfSpace.Store(true)
			return
		}
	}
	jcfg := b.jsConfig // EnableJetStream takes the config as Start gave it
	if err := b.ns.EnableJetStream(&jcfg); err != nil {
		b.logger.Error("broker: starting JetStream again failed; trying again", "err", err)
		b.outOfSpace.Store(true)
		return
	}
	b.heals.Add(1)
	b.logger.Info("broker: JetStream restarted", "took", time.Since(start))
}

// Heals returns how many times the broker restarted JetStream after its
// store ran out of space.
func (b *Broker) Heals() int64 { return b.heals.Load() }
