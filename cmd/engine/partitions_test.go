package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

// TestServePartitioned: `engine serve --event-partitions 4` makes a
// deployment of four event streams, the whole tour works on it (create,
// exec, fork, events tail of a session), and audit verify, replay
// --verify and events export read every partition. A restart without the
// flag keeps the four; one asking for another number is refused.
func TestServePartitioned(t *testing.T) {
	dir := t.TempDir()
	logs, stop := serveStoppable(t, "--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--event-partitions", "4")
	m := regexp.MustCompile(`paddock engine ready" nats=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no listener URL in the log:\n%s", logs.String())
	}
	url := m[1]
	js := testenv.JetStream(t, testenv.Connect(t, url))
	ctx := testenv.Context(t, 2*time.Minute)
	log, err := events.OpenLog(ctx, js, "", "")
	if err != nil || log.Partitions() != 4 {
		t.Fatalf("open log: %v, %v; want 4 partitions", log, err)
	}
	tour(t, url)
	// More sessions until the sessions' events span every partition (the
	// hash spreads sessions at random: a few could all miss one; partition
	// 0 holds the node events anyway); bounded.
	export := func() (n int, parts map[int]bool) {
		parts = map[int]bool{}
		out := mustCLI(t, url, "", "events", "export")
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var ev events.Event
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("export line %q: %v", l, err)
			}
			if ev.SessionID != "" {
				parts[events.PartitionOf(ev.Tenant, ev.SessionID, 4)] = true
			}
			n++
		}
		return n, parts
	}
	n, parts := export()
	for i := 0; len(parts) < 4; i++ {
		if i == 64 {
			t.Fatalf("after %d more sessions, the export spans only partitions %v", i, parts)
		}
		id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
		mustCLI(t, url, "", "sandbox", "exec", id, "--", "true")
		n, parts = export()
	}
	for _, name := range log.Streams() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().State.Msgs == 0 {
			t.Fatalf("partition %s holds no events, though the export spans every partition", name)
		}
	}
	if code, out, errs := cli(t, url, "", "audit", "verify"); code != 0 || !strings.Contains(out, "0 failures") {
		t.Fatalf("audit verify: exit %d:\n%s%s", code, out, errs)
	}
	mustCLI(t, url, "", "replay", "--verify")
	// A durable tail spans the partitions, and resumes every one.
	tailed := strings.Split(strings.TrimSpace(mustCLI(t, url, "", "events", "tail", "--durable", "aud", "--json", "--no-follow")), "\n")
	if len(tailed) < n {
		t.Fatalf("events tail --durable: %d events, want the %d exported or more", len(tailed), n)
	}
	if out := strings.TrimSpace(mustCLI(t, url, "", "events", "tail", "--durable", "aud", "--json", "--no-follow")); out != "" {
		t.Fatalf("a second durable tail delivered again:\n%s", out)
	}
	// engine status and projector status show every partition, and the
	// one engine as the owner of each one's lease.
	status := mustCLI(t, url, "", "status")
	projectors := mustCLI(t, url, "", "projector", "status")
	for k, name := range log.Streams() {
		owner := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+%s\s+sbx_projector_n1\s+sbx_projector_n1(_p%d)?\s`, k, name, k))
		if !owner.MatchString(status) || !owner.MatchString(projectors) {
			t.Errorf("engine status or projector status lacks partition %d's owner:\n%s\n%s", k, status, projectors)
		}
		if !regexp.MustCompile(`(?m)^` + name + `\s`).MatchString(status) {
			t.Errorf("engine status lacks stream %s:\n%s", name, status)
		}
		if !strings.Contains(projectors, " "+name+" ") {
			t.Errorf("projector status lacks a projector on %s:\n%s", name, projectors)
		}
	}
	stop()
	// The number is the deployment's: another one is refused.
	var errb testenv.SyncBuffer
	rctx := testenv.Context(t, time.Minute)
	if code := run(rctx, []string{"serve", "--state-dir", dir, "--sandbox-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--event-partitions", "2"}, nil, &errb, &errb); code == 0 || !strings.Contains(errb.String(), "invalid_state") {
		t.Fatalf("serve with 2 partitions over 4: exit %d; want a failure saying invalid_state:\n%s", code, errb.String())
	}
	logs2, stop2 := serveStoppable(t, "--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local")
	m = regexp.MustCompile(`paddock engine ready" nats=(\S+)`).FindStringSubmatch(logs2.String())
	if m == nil {
		t.Fatalf("restart without the flag: not ready:\n%s", logs2.String())
	}
	if out := mustCLI(t, m[1], "", "audit", "verify"); !strings.Contains(out, "0 failures") {
		t.Fatalf("audit verify after restart:\n%s", out)
	}
	stop2()
}

// TestRepartition: `engine events repartition --partitions 4` is refused
// while the engine and its node run (invalid_state); once they are
// stopped it moves the one-stream deployment onto four partitions: the
// engine started again without a flag finds four, every event exported
// before is exported after, audit verify and replay --verify are clean,
// the rebuilt projection lists every session, and new sessions work. A
// second run is refused.
func TestRepartition(t *testing.T) {
	url := testenv.StartNATSProcess(t)
	args := []string{"--nats-url", url, "--state-dir", t.TempDir(), "--node-id", "n1", "--runtime", "local"}
	_, stop := serveStoppable(t, args...)
	var ids []string
	for range 8 {
		id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
		mustCLI(t, url, "", "sandbox", "exec", id, "--", "echo", "hi")
		ids = append(ids, id)
	}
	before := strings.Split(strings.TrimSpace(mustCLI(t, url, "", "events", "export")), "\n")
	if code, _, errs := cli(t, url, "", "events", "repartition", "--partitions", "4"); code == 0 || !strings.Contains(errs, "invalid_state") {
		t.Fatalf("repartition with the engine running: exit %d, %s; want refused with invalid_state", code, errs)
	}
	stop()
	out := mustCLI(t, url, "", "events", "repartition", "--partitions", "4")
	if !strings.Contains(out, "onto 4 partitions") {
		t.Fatalf("repartition printed:\n%s", out)
	}
	if code, _, errs := cli(t, url, "", "events", "repartition", "--partitions", "4"); code == 0 || !strings.Contains(errs, "invalid_state") {
		t.Fatalf("a second repartition: exit %d, %s; want refused with invalid_state", code, errs)
	}
	_, stop2 := serveStoppable(t, args...)
	defer stop2()
	js := testenv.JetStream(t, testenv.Connect(t, url))
	log, err := events.OpenLog(testenv.Context(t, 10*time.Second), js, "", "")
	if err != nil || log.Partitions() != 4 {
		t.Fatalf("open log after the repartition: %v; want 4 partitions", err)
	}
	after := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(mustCLI(t, url, "", "events", "export")), "\n") {
		after[l] = true
	}
	for _, l := range before {
		if !after[l] {
			t.Fatalf("event exported before the repartition is not exported after: %s", l)
		}
	}
	if code, out, errs := cli(t, url, "", "audit", "verify"); code != 0 || !strings.Contains(out, "0 failures") {
		t.Fatalf("audit verify: exit %d:\n%s%s", code, out, errs)
	}
	mustCLI(t, url, "", "replay", "--verify")
	waitListed(t, url, ids)
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	if out := mustCLI(t, url, "", "sandbox", "exec", id, "--", "echo", "after"); out != "after\n" {
		t.Fatalf("exec after the repartition printed %q", out)
	}
}

// TestServeEnginesSharePartitions: two `engine serve` on one NATS
// deployment of 4 partitions divide the partitions' projectors, two each,
// as `projector status --json` shows; when one stops, the other projects
// all four, and sessions created then are listed.
func TestServeEnginesSharePartitions(t *testing.T) {
	url := testenv.StartNATSProcess(t)
	serve := func(node string) func() {
		_, stop := serveStoppable(t, "--nats-url", url, "--state-dir", t.TempDir(), "--node-id", node, "--runtime", "local",
			"--event-partitions", "4", "--partition-lease-ttl", "2s")
		return stop
	}
	stopA := serve("a")
	stopB := serve("b")
	defer stopB()
	owners := func(want map[string]int) error {
		var st struct {
			Owners []struct {
				Partition int    `json:"partition"`
				Owner     string `json:"owner"`
			} `json:"partition_owners"`
		}
		if err := json.Unmarshal([]byte(mustCLI(t, url, "", "projector", "status", "--json")), &st); err != nil {
			return err
		}
		got := map[string]int{}
		for _, o := range st.Owners {
			got[o.Owner]++
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("partitions by owner %v, want %v", got, want)
		}
		return nil
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		return owners(map[string]int{"sbx_projector_a": 2, "sbx_projector_b": 2})
	})
	stopA()
	testenv.Eventually(t, 60*time.Second, func() error {
		return owners(map[string]int{"sbx_projector_b": 4})
	})
	var ids []string
	for range 8 {
		ids = append(ids, strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create")))
	}
	waitListed(t, url, ids)
}

// waitListed waits until `sandbox list` lists every session of ids (the
// projection has them).
func waitListed(t *testing.T, url string, ids []string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		listed := mustCLI(t, url, "", "sandbox", "list")
		for _, id := range ids {
			if !strings.Contains(listed, id) {
				return fmt.Errorf("session %s not listed:\n%s", id, listed)
			}
		}
		return nil
	})
}
