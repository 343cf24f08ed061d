package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
)

// Cluster is a NATS cluster of embedded servers on 127.0.0.1, each with
// JetStream on disk in a temporary directory.
type Cluster struct {
	t       testing.TB
	cfgs    []broker.Config
	Brokers []*broker.Broker
}

// StartCluster starts n servers (3 for a JetStream cluster that survives
// the loss of one) routed to each other, with base's durability and auth,
// and waits until JetStream has a leader. The servers stop when the test
// ends.
func StartCluster(t testing.TB, n int, base broker.Config) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	// A JetStream cluster wants every server's routes at start, so the
	// route ports are picked first (free ports of the moment).
	routePorts := freePorts(t, n)
	for i := range n {
		cfg := base
		cfg.StoreDir = t.TempDir()
		cfg.Host, cfg.Port = "127.0.0.1", -1
		cfg.ServerName = fmt.Sprintf("s%d", i+1)
		cfg.Cluster = &broker.Cluster{Name: "paddock-test", Host: "127.0.0.1", Port: routePorts[i]}
		for _, p := range routePorts {
			cfg.Cluster.Routes = append(cfg.Cluster.Routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	// Started together: each waits for a quorum to form.
	errs := make(chan error, n)
	c.Brokers = make([]*broker.Broker, n)
	for i := range n {
		go func() { // joined below through errs
			b, err := broker.Start(c.cfgs[i])
			c.Brokers[i] = b
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("start cluster: %v", err)
		}
	}
	for i, b := range c.Brokers {
		// Pin the client port picked, so that a restart comes back there.
		c.cfgs[i].Port = b.Server().Addr().(*net.TCPAddr).Port
	}
	t.Cleanup(func() {
		for _, b := range c.Brokers {
			if b != nil {
				b.Shutdown()
			}
		}
	})
	c.WaitJetStream(30 * time.Second)
	return c
}

// freePorts returns n ports that were free a moment ago on 127.0.0.1.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// URL is every running server's client URL, comma separated, as a client
// that should survive the loss of one server is given.
func (c *Cluster) URL() string {
	var urls []string
	for _, b := range c.Brokers {
		if b != nil {
			urls = append(urls, b.ClientURL())
		}
	}
	return strings.Join(urls, ",")
}

// Stop shuts server i down (its files stay).
func (c *Cluster) Stop(i int) {
	c.Brokers[i].Shutdown()
	c.Brokers[i] = nil
}

// Restart starts server i again on its ports and files.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	b, err := broker.Start(c.cfgs[i])
	if err != nil {
		c.t.Fatalf("restart server %s: %v", c.cfgs[i].ServerName, err)
	}
	c.Brokers[i] = b
}

// WaitJetStream waits until a client of the running servers gets an
// answer from JetStream (a meta leader is elected) and every running
// server is a current, online peer of the meta group.
func (c *Cluster) WaitJetStream(d time.Duration) {
	c.t.Helper()
	nc := Connect(c.t, c.URL())
	defer nc.Close()
	js := JetStream(c.t, nc)
	Eventually(c.t, d, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err != nil {
			return err
		}
		return c.metaCurrent()
	})
}

// metaCurrent returns nil once every running server is current in the
// JetStream meta group and its leader sees every other running server
// online: before that, an R3 asset can be refused with "no suitable
// peers for placement, peer offline" (seen under CI's load).
func (c *Cluster) metaCurrent() error {
	running := 0
	var leader *server.Server
	for _, b := range c.Brokers {
		if b == nil {
			continue
		}
		running++
		s := b.Server()
		if !s.JetStreamIsCurrent() {
			return fmt.Errorf("server %s is not current in the meta group", s.Name())
		}
		if s.JetStreamIsLeader() {
			leader = s
		}
	}
	if leader == nil {
		return errors.New("no running server leads the meta group")
	}
	info, err := leader.Jsz(nil)
	if err != nil {
		return err
	}
	online := 0
	if info.Meta != nil {
		for _, r := range info.Meta.Replicas {
			if r.Current && !r.Offline {
				online++
			}
		}
	}
	if online < running-1 {
		return fmt.Errorf("the meta leader sees %d of the %d other running servers online", online, running-1)
	}
	return nil
}

// GatherLeaders moves the leader of every stream of log to server, the
// placement at its worst that a leader spread must undo: nil once server
// leads them all, else an error naming the first stream it tried to move
// (call it under Eventually: a stepdown may hand the lead elsewhere).
func GatherLeaders(ctx context.Context, js jetstream.JetStream, log *events.Log, server string) error {
	leaders, err := log.Leaders(ctx)
	if err != nil {
		return err
	}
	for k, l := range leaders {
		if l != server {
			_, err := events.MoveLeader(ctx, js, log.Streams()[k], server)
			return fmt.Errorf("leader of %s was %s (moved: %v)", log.Streams()[k], l, err)
		}
	}
	return nil
}

// PartitionedLog makes the default events deployment on a cluster with n
// partitions at three replicas (retrying while a new cluster refuses R3
// for a moment) and returns its log.
func PartitionedLog(t testing.TB, js jetstream.JetStream, n int) *events.Log {
	t.Helper()
	ctx := Context(t, 4*time.Minute)
	// A cluster just formed on a loaded machine can take minutes to place
	// n R3 streams (CI: over a minute for the third of three).
	Eventually(t, 3*time.Minute, func() error {
		_, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: 3, Partitions: n})
		return err
	})
	log, err := events.OpenLog(ctx, js, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return log
}
