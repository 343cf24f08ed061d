package projection_test

import (
	"fmt"
	"testing"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
)

// TestLiveProcesses: the processes a history leaves without an end.
func TestLiveProcesses(t *testing.T) {
	ok, failed := true, false
	evs := []events.Event{
		{Seq: 3, Op: "proc_start", Phase: events.PhaseStart, SpanID: "a"},
		{Seq: 4, Op: "proc_start", Phase: events.PhaseFinish, SpanID: "a", OK: &ok},
		{Seq: 5, Op: "proc_start", Phase: events.PhaseStart, SpanID: "b"},
		{Seq: 6, Op: "proc_start", Phase: events.PhaseFinish, SpanID: "b", OK: &failed},
		{Seq: 7, Op: "proc_start", Phase: events.PhaseStart, SpanID: "c"},
		{Seq: 8, Op: "proc_start", Phase: events.PhaseFinish, SpanID: "c", OK: &ok},
		{Seq: 9, Op: "proc_exit", Phase: events.PhaseStart, SpanID: "d", Data: []byte(`{"process_id":7}`)},
		{Seq: 10, Op: "proc_start", Phase: events.PhaseStart, SpanID: "e"}, // in flight
	}
	if got := projection.LiveProcesses(evs); fmt.Sprint(got) != "[3 10]" {
		t.Fatalf("live %v, want [3 10]", got)
	}
}
