package bench_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/scheduler"
	"github.com/paddock-dev/paddock/testenv"
	"github.com/paddock-dev/paddock/testenv/control"
)

// fleetSize is how many agent-node processes TestFleetProcesses starts:
// $PADDOCK_FLEET, or 20 (what CI runs, in well under a minute).
func fleetSize(t *testing.T) int {
	t.Helper()
	v := os.Getenv("PADDOCK_FLEET")
	if v == "" {
		return 20
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 10 || n > 2000 {
		t.Fatalf("PADDOCK_FLEET=%q: want a number of processes, 10 to 2000", v)
	}
	return n
}

// nodeProc is one agent-node process, in a process group of its own so
// that a kill takes whatever it started with it.
type nodeProc struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been reaped
}

// kill sends SIGKILL to the process's group and waits until it is reaped.
func (p *nodeProc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// running reports whether the process has not exited.
func (p *nodeProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// rssKB is the process's resident set (VmRSS in /proc/PID/status), in KiB.
func (p *nodeProc) rssKB() (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", p.cmd.Process.Pid)
}

// startNodeProcs starts n agent-node processes (ids f1..fn) on the local
// runtime, each with its own directories under dir, connected to url. Every
// one is killed, with its group, when the test ends, even when it fails.
func startNodeProcs(t *testing.T, bin, url, dir string, n int) []*nodeProc {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "PADDOCK_CREDS" && k != "PADDOCK_URL" && k != "PADDOCK_CONFIG" {
			env = append(env, kv)
		}
	}
	procs := make([]*nodeProc, 0, n)
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
		}
		testenv.UnmountOverlays(t, dir)
		if t.Failed() {
			for _, p := range procs[:min(len(procs), 3)] {
				b, _ := os.ReadFile(filepath.Join(dir, p.id+".log"))
				t.Logf("--- %s log:\n%s", p.id, b)
			}
		}
	})
	for i := range n {
		id := fmt.Sprintf("f%d", i+1)
		logf, err := os.Create(filepath.Join(dir, id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--nats-url", url, "--id", id, "--runtime", "local",
			"--dir", filepath.Join(dir, id), "--chunk-cache-dir", filepath.Join(dir, id+"-chunks"),
			"--drain-timeout", "2s")
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			logf.Close()
			t.Fatalf("start %s: %v", id, err)
		}
		p := &nodeProc{id: id, cmd: cmd, done: make(chan struct{})}
		go func() { // reaps the process; kill waits for it
			_ = cmd.Wait()
			logf.Close()
			close(p.done)
		}()
		procs = append(procs, p)
	}
	return procs
}

// TestFleetProcesses runs a fleet of real agent-node processes (the local
// runtime, each in its own directories) against a three-server cluster
// with an engine (scheduler with auto-resume, projector) in the test: it
// measures each process's memory and the servers' connections and
// subscriptions, checks that placement spreads creates over the nodes,
// then kills a tenth of the processes with SIGKILL: their sessions are
// declared lost and auto-resume moves them (with their persisted files)
// to nodes that are up, while every other session stays on its node and
// keeps serving execs, with no loss in its history.
//
// CI runs 20 processes; the figures in docs/scale.md come from
//
//	PADDOCK_FLEET=300 go test -run TestFleetProcesses -count=1 -v -timeout 30m ./bench/
func TestFleetProcesses(t *testing.T) {
	n := fleetSize(t)
	ctx := testenv.Context(t, 10*time.Minute)
	c := testenv.StartCluster(t, 3, broker.Config{})
	url := c.URL()
	nc := testenv.Connect(t, url)
	js := testenv.JetStream(t, nc)
	sched, _ := control.Start(t, ctx, nc, js, 3, scheduler.Config{
		Name: "fleet-engine", NodeTTL: 6 * time.Second, AutoResume: true, LostSweep: 500 * time.Millisecond,
	}, projector.Config{Name: "projector_fleet"}, nil)

	// Connections and subscriptions of the cluster before the fleet: the
	// engine's, the test's and the servers' own.
	base := serverCounts(t, c)

	bin := testenv.BuildBinary(t, "./cmd/agent-node")
	procs := startNodeProcs(t, bin, url, t.TempDir(), n)
	started := time.Now()
	testenv.Eventually(t, time.Minute+time.Duration(n)*200*time.Millisecond, func() error {
		for _, p := range procs {
			if !p.running() {
				t.Fatalf("node %s exited", p.id)
			}
		}
		if got := len(sched.Nodes()); got < n {
			return fmt.Errorf("the scheduler knows %d of %d nodes", got, n)
		}
		return nil
	})

	t.Logf("FLEET n=%d: every node registered %s after the last process started", n, time.Since(started).Round(100*time.Millisecond))

	// One session per node, from 8 clients at once.
	clients := make([]*client.Client, 8)
	for i := range clients {
		cl, err := client.New(testenv.Connect(t, c.Brokers[i%3].ClientURL()), client.Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = cl
	}
	ids := make([]string, n)
	parallel(t, len(clients), n, func(w, i int) error {
		s, err := clients[w].Create(ctx, commands.CreateArgs{Runtime: "local"})
		ids[i] = s.SessionID
		return err
	})
	nodeOf := map[string]string{}
	perNode := map[string]int{}
	for _, id := range ids {
		l, err := clients[0].Lookup(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		nodeOf[id] = l.Node
		perNode[l.Node]++
	}
	most := 0
	for _, k := range perNode {
		most = max(most, k)
	}
	t.Logf("FLEET n=%d placement: %d creates from %d clients at once on %d nodes, at most %d on one", n, n, len(clients), len(perNode), most)
	// Least loaded placement, with the creates in flight counted: the n
	// creates land on most of the n nodes, and none gets a pile.
	if len(perNode) < n*3/4 || most > 3 {
		t.Fatalf("%d creates went to %d nodes, at most %d on one; want at least %d nodes and at most 3 on one", n, len(perNode), most, n*3/4)
	}

	// The nodes to kill: a tenth of them, those holding sessions. Their
	// sessions get a file and a snapshot, which auto-resume restores.
	victims := map[string]bool{}
	for _, id := range ids {
		if len(victims) == n/10 {
			break
		}
		victims[nodeOf[id]] = true
	}
	var lost, kept []string
	for _, id := range ids {
		if victims[nodeOf[id]] {
			lost = append(lost, id)
		} else {
			kept = append(kept, id)
		}
	}
	parallel(t, len(clients), len(lost), func(w, i int) error {
		if _, err := clients[w].WriteFile(ctx, lost[i], "notes.md", []byte(lost[i]), 0o640); err != nil {
			return err
		}
		_, err := clients[w].Persist(ctx, lost[i])
		return err
	})
	execAll := func(sessions []string) {
		t.Helper()
		parallel(t, len(clients), len(sessions), func(w, i int) error {
			res, err := clients[w].Exec(ctx, sessions[i], commands.ExecArgs{Argv: []string{"echo", "ok"}})
			if err == nil && (res.ExitCode != 0 || string(res.Stdout) != "ok\n") {
				err = fmt.Errorf("exec in %s: exit %d, stdout %q", sessions[i], res.ExitCode, res.Stdout)
			}
			return err
		})
	}
	execAll(ids)

	// The figures: every process's RSS, every server's counts.
	var rss []int
	for _, p := range procs {
		kb, err := p.rssKB()
		if err != nil {
			t.Fatal(err)
		}
		rss = append(rss, kb)
	}
	slices.Sort(rss)
	total := 0
	for _, kb := range rss {
		total += kb
	}
	t.Logf("FLEET n=%d agent-node RSS (1 local session each, after create+exec): min %d KiB, median %d KiB, p90 %d KiB, max %d KiB, total %.1f MiB",
		n, rss[0], rss[len(rss)/2], rss[len(rss)*9/10], rss[len(rss)-1], float64(total)/1024)
	after := serverCounts(t, c)
	for i := range after {
		t.Logf("FLEET n=%d server %s: connections %d (before the fleet %d), subscriptions %d (before %d), routes %d",
			n, after[i].name, after[i].conns, base[i].conns, after[i].subs, base[i].subs, after[i].routes)
	}
	sumConns, sumSubs, baseConns, baseSubs := 0, uint32(0), 0, uint32(0)
	for i := range after {
		sumConns += after[i].conns
		baseConns += base[i].conns
		sumSubs = max(sumSubs, after[i].subs)
		baseSubs = max(baseSubs, base[i].subs)
	}
	// The fleet's share: what came with it, less the test's clients.
	nodeConns := sumConns - baseConns - len(clients)
	t.Logf("FLEET n=%d per node: %.2f client connections, %.1f subscriptions in each server's interest graph (the %d test clients' left out of the connections, not of the subscriptions)",
		n, float64(nodeConns)/float64(n), float64(sumSubs-baseSubs)/float64(n), len(clients))
	if nodeConns != n {
		t.Fatalf("the servers count %d more client connections with the fleet up, less the test's %d clients; want %d (one per node)", nodeConns, len(clients), n)
	}

	// Kill a tenth.
	for _, p := range procs {
		if victims[p.id] {
			p.kill()
		}
	}
	killed := time.Now()
	// The others are untouched: their execs work while the loss is
	// declared and the lost sessions are moved.
	execAll(kept)
	log := events.NewLog(js, "", "")
	// history reads a session's events; a read that stalls on the loaded
	// machine (unavailable, retryable) is read again.
	history := func(id string) []events.Event {
		t.Helper()
		var evs []events.Event
		testenv.Eventually(t, time.Minute, func() error {
			var err error
			evs, err = log.Session(ctx, "default", id)
			return err
		})
		return evs
	}
	testenv.Eventually(t, 3*time.Minute, func() error {
		for _, id := range lost {
			l, err := clients[0].Lookup(ctx, id)
			if err != nil {
				return err
			}
			if l.Status != "running" || victims[l.Node] {
				return fmt.Errorf("session %s: %s on %s; want running on a node that is up", id, l.Status, l.Node)
			}
		}
		return nil
	})
	t.Logf("FLEET n=%d: %d sessions of %d killed nodes resumed elsewhere %s after the kill (node TTL 6s)",
		n, len(lost), len(victims), time.Since(killed).Round(100*time.Millisecond))
	for _, id := range lost {
		if !hasOp(history(id), commands.OpNodeLost) {
			t.Fatalf("session %s of a killed node has no node_lost in its history", id)
		}
		got, err := clients[0].ReadFile(ctx, id, "notes.md")
		if err != nil || string(got) != id {
			t.Fatalf("notes.md of %s after the move: %q, %v", id, got, err)
		}
	}
	execAll(lost)
	for _, id := range kept {
		l, err := clients[0].Lookup(ctx, id)
		if err != nil || l.Status != "running" || l.Node != nodeOf[id] {
			t.Fatalf("untouched session %s: %+v, %v; want running on %s", id, l, err, nodeOf[id])
		}
		if hasOp(history(id), commands.OpNodeLost) {
			t.Fatalf("session %s on a node that was never killed has node_lost in its history", id)
		}
	}
	for _, p := range procs {
		if !victims[p.id] && !p.running() {
			t.Fatalf("node %s, never killed, exited", p.id)
		}
	}
}

// hasOp says whether evs hold an event of op.
func hasOp(evs []events.Event, op commands.Op) bool {
	return slices.ContainsFunc(evs, func(e events.Event) bool { return e.Op == string(op) })
}

// counts are one server's connection figures.
type counts struct {
	name        string
	conns       int
	subs        uint32
	routes      int
	connzClient int
}

// serverCounts reads every server's monitoring (Varz, Connz, Subsz
// through the embedded server's API).
func serverCounts(t *testing.T, c *testenv.Cluster) []counts {
	t.Helper()
	var out []counts
	for _, b := range c.Brokers {
		s := b.Server()
		v, err := s.Varz(nil)
		if err != nil {
			t.Fatal(err)
		}
		cz, err := s.Connz(&server.ConnzOptions{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		sz, err := s.Subsz(nil)
		if err != nil {
			t.Fatal(err)
		}
		if cz.Total != v.Connections {
			t.Fatalf("server %s: Connz counts %d clients, Varz %d", s.Name(), cz.Total, v.Connections)
		}
		out = append(out, counts{name: s.Name(), conns: v.Connections, subs: sz.NumSubs, routes: v.Routes, connzClient: cz.Total})
	}
	return out
}

// parallel runs fn for i in 0..n-1 on workers goroutines (fn gets the
// worker's index too) and fails the test with the first error.
func parallel(t *testing.T, workers, n int, fn func(w, i int) error) {
	t.Helper()
	var (
		mu    sync.Mutex
		first error
		next  int
		wg    sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() { // joined below
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if i >= n || stop {
					return
				}
				if err := fn(w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("item %d: %w", i, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}
