package nodes_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestFairShare: a tenant that fills its share of a node's command slots
// with commands that do not end gets quota_exceeded (retryable, naming
// the limit) for one more, while another tenant's exec on the same node
// is answered at once: it does not queue behind the flood. The gated
// commands end only after the other tenant's answer came, so the order is
// shown without timing anything.
func TestFairShare(t *testing.T) {
	const share = 4
	st := testenv.StartStack(t, testenv.StackOptions{Tenant: "greedy", Node: nodes.Config{MaxConcurrent: 2 * share, TenantConcurrent: share, TenantSessions: 2}})
	ctx := testenv.Context(t, 60*time.Second)
	greedy := st.Client
	polite := tenantClient(t, st, "polite")
	g := mustCreate(t, ctx, greedy, commands.CreateArgs{})
	p := mustCreate(t, ctx, polite, commands.CreateArgs{})
	gate := filepath.Join(t.TempDir(), "open")
	wait := commands.ExecArgs{Shell: fmt.Sprintf(`while [ ! -e %q ]; do sleep 0.02; done; echo done`, gate)}
	var wg sync.WaitGroup
	results := make([]error, share)
	for i := range share {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := greedy.Exec(ctx, g.SessionID, wait)
			if err == nil && res.Stdout != "done\n" {
				err = fmt.Errorf("stdout %q", res.Stdout)
			}
			results[i] = err
		}()
	}
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644); wg.Wait() })
	testenv.Eventually(t, 20*time.Second, func() error {
		n := 0
		for _, ev := range sessionEvents(t, st, "greedy", g.SessionID) {
			if ev.Op == "exec" && ev.Phase == events.PhaseStart {
				n++
			}
		}
		if n < share {
			return fmt.Errorf("%d of the greedy tenant's %d commands started", n, share)
		}
		return nil
	})

	_, err := greedy.Exec(ctx, g.SessionID, commands.ExecArgs{Argv: []string{"true"}})
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != errcode.QuotaExceeded || !e.Retryable() || !strings.Contains(e.Message, fmt.Sprint(share)) {
		t.Fatalf("a command past the greedy tenant's share: got %v, want quota_exceeded, retryable, naming the limit", err)
	}
	res, err := polite.Exec(ctx, p.SessionID, commands.ExecArgs{Argv: []string{"echo", "served"}})
	if err != nil || res.Stdout != "served\n" {
		t.Fatalf("the polite tenant's exec while the greedy one saturates the node: %+v, %v", res, err)
	}
	for _, ev := range sessionEvents(t, st, "greedy", g.SessionID) {
		if ev.Op == "exec" && ev.Phase == events.PhaseFinish {
			t.Fatalf("a gated command finished before the polite tenant was answered")
		}
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range results {
		if err != nil {
			t.Errorf("gated command %d: %v", i, err)
		}
	}
	// Its slots given back, the greedy tenant is served again.
	if _, err := greedy.Exec(ctx, g.SessionID, commands.ExecArgs{Argv: []string{"true"}}); err != nil {
		t.Fatalf("after its commands ended: %v", err)
	}

	// Sessions: the greedy tenant's second session fills its share of the
	// node; a third is quota_exceeded (the scheduler found no other node),
	// and the polite tenant still creates.
	if _, err := greedy.Create(ctx, commands.CreateArgs{}); err != nil {
		t.Fatal(err)
	}
	if _, err := greedy.Create(ctx, commands.CreateArgs{}); !errors.Is(err, errcode.ErrQuotaExceeded) {
		t.Fatalf("a third greedy session on a node that allows 2: got %v, want quota_exceeded", err)
	}
	if _, err := polite.Create(ctx, commands.CreateArgs{}); err != nil {
		t.Fatalf("the polite tenant's second session: %v", err)
	}
}
