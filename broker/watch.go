package broker

import (
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// ListenerPorts returns the ports the server listens on: clients, routes,
// monitoring and profiling.
func (b *Broker) ListenerPorts() []int {
	ns := b.ns
	var ports []int
	if a, ok := ns.Addr().(*net.TCPAddr); ok && a != nil {
		ports = append(ports, a.Port)
	}
	for _, a := range []*net.TCPAddr{ns.ClusterAddr(), ns.MonitorAddr(), ns.ProfilerAddr()} {
		if a != nil {
			ports = append(ports, a.Port)
		}
	}
	return ports
}

// WatchConfig reloads the server (Reload) when the config file at path
// changes (the auth store's, on engine auth add/rm) and returns the
// function that stops watching and waits for the watch to end. It polls
// the file's mtime: a change shows within a second.
func (b *Broker) WatchConfig(path string, logger *slog.Logger) (stop func()) {
	stat := func() time.Time {
		fi, err := os.Stat(path)
		if err != nil {
			return time.Time{}
		}
		return fi.ModTime()
	}
	last := stat()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if m := stat(); !m.Equal(last) {
				last = m
				if err := b.Reload(); err != nil {
					logger.Error("auth config reload failed; the server keeps the previous one", "err", err)
					continue
				}
				logger.Info("auth config reloaded", "file", path)
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
