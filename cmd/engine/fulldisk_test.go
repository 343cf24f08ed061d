package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/testenv"
)

// TestFullDiskHeals: `engine serve` with its state dir on a small tmpfs
// that a ballast file fills. While it is full, ops fail with the typed
// unavailable error, `engine status` shows the node's disk critical and a
// create is refused with no_capacity; once the ballast is deleted, ops
// succeed again within 30s with no restart, every op that was acknowledged
// is in the events, the hash chains verify, and the projection matches a
// replay. The embedded server's
// errors reach the engine's log at ERROR, component=nats-server.
func TestFullDiskHeals(t *testing.T) {
	state := testenv.Tmpfs(t, 64<<20)
	logs := startServe(t, "--state-dir", state, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local",
		"--capture-output", "256", "--disk-interval", "100ms", "--disk-warn", "8m", "--disk-critical", "4m")
	m := regexp.MustCompile(`paddock engine ready" nats=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no listener URL in the log:\n%s", logs.String())
	}
	url := m[1]
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	var acked []string // markers of the execs that succeeded
	exec := func() (int, string) {
		mark := fmt.Sprintf("mark-%d", len(acked))
		code, out, errs := cli(t, url, "", "sandbox", "exec", id, "--timeout", "5s", "--", "echo", mark)
		if code == 0 && out == mark+"\n" {
			acked = append(acked, mark)
		}
		return code, errs
	}
	for range 5 {
		if code, errs := exec(); code != 0 {
			t.Fatalf("exec before the disk filled: exit %d, %s", code, errs)
		}
	}

	start := time.Now()
	stage := func(what string) { t.Logf("%s: %s", time.Since(start).Round(time.Millisecond), what) }
	ballast := filepath.Join(state, "ballast")
	testenv.Fill(t, ballast)
	stage("disk filled")
	// Ops fail, typed, once a write meets the full disk.
	testenv.Eventually(t, 60*time.Second, func() error {
		code, errs := exec()
		if code == 0 {
			return fmt.Errorf("exec on a full disk succeeded")
		}
		if !strings.HasPrefix(errs, "error: unavailable: ") {
			t.Fatalf("exec on a full disk: exit %d, %q; want error: unavailable", code, errs)
		}
		return nil
	})
	stage("ops fail")
	// engine status says the node's disk is critical.
	testenv.Eventually(t, 30*time.Second, func() error {
		var rep operator.Report
		if err := json.Unmarshal([]byte(mustCLI(t, url, "", "status", "--json")), &rep); err != nil {
			return err
		}
		for _, n := range rep.Nodes {
			if n.Node == "n1" && n.DiskCritical() {
				return nil
			}
		}
		return fmt.Errorf("status shows no critical disk on n1: %+v", rep.Nodes)
	})
	stage("status says critical")
	if out := mustCLI(t, url, "", "status"); !strings.Contains(out, "CRITICAL") || !strings.Contains(out, state) {
		t.Errorf("engine status on a full disk does not say critical:\n%s", out)
	}
	if code, _, errs := cli(t, url, "", "sandbox", "create"); code == 0 || !strings.HasPrefix(errs, "error: no_capacity: ") {
		t.Errorf("create on a full disk: exit %d, %q; want error: no_capacity", code, errs)
	}
	if !regexp.MustCompile(`level=ERROR msg=.*component=nats-server`).MatchString(logs.String()) {
		t.Errorf("no ERROR line of component=nats-server in the log:\n%s", logs.String())
	}

	stage("create refused")
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	testenv.Eventually(t, 40*time.Second, func() error {
		if code, errs := exec(); code != 0 {
			return fmt.Errorf("exec after the space was freed: exit %d, %s", code, errs)
		}
		return nil
	})
	t.Logf("ops succeed again %s after the space was freed", time.Since(freed).Round(time.Millisecond))
	if since := time.Since(freed); since > 35*time.Second {
		t.Errorf("ops took %s to succeed after the space was freed, want within 30s", since)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		code, _, errs := cli(t, url, "", "sandbox", "create")
		if code != 0 {
			return fmt.Errorf("create after the space was freed: exit %d, %s", code, errs)
		}
		return nil
	})
	stage("create succeeds")
	for range 3 {
		if code, errs := exec(); code != 0 {
			t.Fatalf("exec after healing: exit %d, %s", code, errs)
		}
	}

	stage("execs succeed")
	defer func() {
		if t.Failed() {
			t.Logf("engine log:\n%s", logs.String())
		}
	}()
	// Every acknowledged exec is in the events, and the chains verify.
	out := mustCLI(t, url, "", "events", "tail", "--session", id, "--op", "exec", "--no-follow", "--json")
	for _, mark := range acked {
		if !strings.Contains(out, mark) {
			t.Errorf("acknowledged exec %s is not in the events:\n%s", mark, out)
		}
	}
	stage("events read")
	testenv.Eventually(t, 30*time.Second, func() error {
		if code, out, errs := cli(t, url, "", "audit", "verify"); code != 0 || !strings.Contains(out, "0 failures") {
			return fmt.Errorf("audit verify: exit %d\n%s%s", code, out, errs)
		}
		return nil
	})
	stage("audit verify clean")
	// The projector goes on after JetStream's restart: the projection
	// matches a replay of the events.
	tries := 0
	testenv.Eventually(t, 30*time.Second, func() error {
		tries++
		if code, out, errs := cli(t, url, "", "replay", "--verify"); code != 0 {
			return fmt.Errorf("replay --verify: exit %d\n%s%s", code, out, errs)
		}
		return nil
	})
	stage(fmt.Sprintf("replay --verify clean (try %d)", tries))
	if !strings.Contains(logs.String(), "JetStream restarted") {
		t.Errorf("the log does not say JetStream restarted:\n%s", logs.String())
	}
}
