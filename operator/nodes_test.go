package operator_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/testenv"
)

// TestNodes: a node that heartbeats is listed live, is cordoned and
// uncordoned by name; a node that does not answer is unavailable.
func TestNodes(t *testing.T) {
	b := testenv.StartBroker(t)
	nc := testenv.Connect(t, b.ClientURL())
	js := testenv.JetStream(t, nc)
	ctx := testenv.Context(t, time.Minute)
	if rows, err := operator.ListNodes(ctx, nc, js, 200*time.Millisecond); err != nil || len(rows) != 0 {
		t.Fatalf("no nodes: got %+v, %v; want none", rows, err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	testenv.StartAgent(t, b.ClientURL(), nodes.Config{ID: "n1"})
	testenv.Eventually(t, 20*time.Second, func() error {
		rows, err := operator.ListNodes(ctx, nc, js, 500*time.Millisecond)
		if err != nil {
			return err
		}
		if len(rows) != 1 || rows[0].Node != "n1" || !rows[0].Live {
			return errors.New("want n1 live")
		}
		return nil
	})
	info, err := operator.Cordon(ctx, nc, "ops", "n1", true)
	if err != nil || info.Node != "n1" || !info.Cordoned {
		t.Fatalf("cordon: got %+v, %v; want n1 cordoned", info, err)
	}
	if info, err = operator.Cordon(ctx, nc, "ops", "n1", false); err != nil || info.Cordoned {
		t.Fatalf("uncordon: got %+v, %v; want n1 not cordoned", info, err)
	}
	_, err = operator.Cordon(ctx, nc, "ops", "gone", true)
	if !errors.Is(err, errcode.ErrUnavailable) || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("cordon of a node that is not there: got %v, want unavailable naming it", err)
	}
}
