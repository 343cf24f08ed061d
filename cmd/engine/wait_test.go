package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// readers are the CLI's readers of the events stream and the projection.
var readers = [][]string{
	{"audit", "verify"},
	{"replay"},
	{"events", "tail", "--no-follow"},
	{"sandbox", "list"},
}

// TestReadersAfterServerReturns: right after the server that led the
// events stream of a 3-server cluster (replicas 3) was stopped and came
// back, the CLI's readers succeed: they wait for the stream instead of
// failing on the first timeout (issue 12 saw audit verify fail once in
// two runs with "events consumer: context deadline exceeded").
func TestReadersAfterServerReturns(t *testing.T) {
	c := testenv.StartCluster(t, 3, broker.Config{SyncInterval: time.Second})
	url := c.URL()
	serveFor(t, "--nats-url", url, "--replicas", "3", "--state-dir", t.TempDir(), "--node-id", "n1", "--runtime", "local")
	t.Setenv("PADDOCK_CREDS", "none") // the cluster runs without auth here
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	mustCLI(t, url, "", "sandbox", "exec", id, "--", "true")
	waitProjected(t, url)

	js := testenv.JetStream(t, testenv.Connect(t, url))
	ctx := testenv.Context(t, time.Minute)
	s, err := js.Stream(ctx, events.DefaultStream)
	if err != nil || s.CachedInfo().Cluster == nil {
		t.Fatalf("events stream: %v", err)
	}
	leader := -1
	for i := range 3 {
		if s.CachedInfo().Cluster.Leader == fmt.Sprintf("s%d", i+1) {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("the events stream's leader %q is none of s1..s3", s.CachedInfo().Cluster.Leader)
	}
	check := func(args []string, code int, out, errs, when string) {
		t.Helper()
		if code != 0 {
			t.Errorf("engine %s %s: exit %d, %s", strings.Join(args, " "), when, code, errs)
		} else if args[0] == "audit" && !strings.Contains(out, "0 failures") {
			t.Errorf("audit verify %s:\n%s", when, out)
		} else if args[0] != "audit" && !strings.Contains(out, id) {
			t.Errorf("engine %s %s does not show session %s:\n%s", strings.Join(args, " "), when, id, out)
		}
	}
	c.Stop(leader)
	c.Restart(leader)
	for _, args := range readers {
		code, out, errs := cli(t, url, "", args...)
		check(args, code, out, errs, "right after the stream's leader came back")
	}

	// Without a quorum, a reader that may not wait fails; readers started
	// then wait for the stream, and succeed once the servers are back.
	other := (leader + 1) % 3
	c.Stop(leader)
	c.Stop(other)
	if code, _, errs := cli(t, c.URL(), "", "audit", "verify", "--wait", "0s"); code != exitFailure || !strings.Contains(errs, "unavailable") {
		t.Fatalf("audit verify --wait 0s with no quorum: exit %d, %q; want unavailable", code, errs)
	}
	type result struct {
		args            []string
		code            int
		out, errs, when string
	}
	results := make(chan result, len(readers))
	for _, args := range readers {
		go func() { // joined below through results
			code, out, errs := cli(t, url, "", append(args, "--wait", "45s")...)
			results <- result{args, code, out, errs, "started with no quorum"}
		}()
	}
	c.Restart(leader)
	c.Restart(other)
	for range readers {
		r := <-results
		check(r.args, r.code, r.out, r.errs, r.when)
	}
}

// TestReadersGiveUp: with JetStream unavailable (two servers of three
// down: no quorum), each reader gives up within its --wait, saying what
// it waited for; a stream that does not exist fails at once, whatever
// --wait says.
func TestReadersGiveUp(t *testing.T) {
	c := testenv.StartCluster(t, 3, broker.Config{SyncInterval: time.Second})
	url := c.URL()
	t.Setenv("PADDOCK_CREDS", "none")
	ctx := testenv.Context(t, time.Minute)
	js := testenv.JetStream(t, testenv.Connect(t, url))

	// No projection bucket yet: sandbox list fails at once.
	start := time.Now()
	code, _, errs := cli(t, url, "", "sandbox", "list", "--wait", "30s")
	if code != exitFailure || !strings.Contains(errs, "no sessions projection") || time.Since(start) > 5*time.Second {
		t.Fatalf("sandbox list without its bucket: exit %d after %s, %q; want unavailable at once", code, time.Since(start), errs)
	}

	// Every server must be up as a peer to place three replicas.
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := events.EnsureStream(ctx, js, events.StreamConfig{Replicas: 3})
		return err
	})
	c.Stop(1)
	c.Stop(2)
	const wait = 2 * time.Second
	for _, args := range readers[:3] {
		start := time.Now()
		code, _, errs := cli(t, c.URL(), "", append(args, "--wait", wait.String())...)
		took := time.Since(start)
		if code != exitFailure || !strings.HasPrefix(errs, "error: unavailable: the events stream SBX_EVENTS ") || !strings.Contains(errs, "for 2s") {
			t.Errorf("engine %s with no quorum: exit %d, %q; want unavailable saying what it waited for", strings.Join(args, " "), code, errs)
		}
		if took < wait || took > wait+3*time.Second {
			t.Errorf("engine %s gave up after %s; want about its --wait of %s", strings.Join(args, " "), took, wait)
		}
	}
}
