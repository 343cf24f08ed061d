package events_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

// TestRecordedHistoryDecodes decodes every event of a history a real node
// recorded (the nodes package's TestRecordedHistory -record) through the
// exported types, refusing unknown members: a field renamed or dropped in
// a data type without a new event version fails here.
func TestRecordedHistoryDecodes(t *testing.T) {
	b, err := os.ReadFile("../projection/testdata/lifecycle.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	strict := jsonv2.RejectUnknownMembers(true)
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if bytes.Contains(line, []byte(`"kind":`)) {
			var ev events.NodeEvent
			if err := jsonv2.Unmarshal(line, &ev, strict); err != nil {
				t.Fatalf("line %d: node event: %v", n, err)
			}
			if err := ev.CheckVersion(); err != nil {
				t.Fatalf("line %d: %v", n, err)
			}
			if ev.Kind == "registered" {
				var info events.NodeInfo
				if err := jsonv2.Unmarshal(ev.Data, &info, strict); err != nil || info.Node != ev.Node {
					t.Fatalf("line %d: registered data %s: %v", n, ev.Data, err)
				}
			}
			continue
		}
		var ev events.Event
		if err := jsonv2.Unmarshal(line, &ev, strict); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if err := ev.CheckVersion(); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		d := events.NewData(ev.Op, ev.Phase)
		if d == nil || len(ev.Data) == 0 {
			if len(ev.Data) > 0 {
				t.Errorf("line %d: %s %s has data but no data type", n, ev.Op, ev.Phase)
			}
			continue
		}
		if err := jsonv2.Unmarshal(ev.Data, d, strict); err != nil {
			t.Errorf("line %d: %s %s: %v", n, ev.Op, ev.Phase, err)
		}
		seen[ev.Op+"."+string(ev.Phase)] = true
	}
	for _, op := range append([]commands.Op{commands.OpCreate}, commands.SessionOps...) {
		if op == commands.OpCheckpoint {
			// Recorded on the local runtime, which cannot checkpoint: the
			// nodes package's TestRunscCheckpointResumeOnAnotherNode
			// decodes checkpoint's events strictly.
			continue
		}
		for _, ph := range []events.Phase{events.PhaseStart, events.PhaseFinish} {
			if events.NewData(string(op), ph) != nil && !seen[string(op)+"."+string(ph)] {
				t.Errorf("the recorded history has no %s %s with data", op, ph)
			}
		}
	}
}

func TestCheckVersion(t *testing.T) {
	for _, v := range []int{0, 1, events.Version + 1} {
		ev := events.Event{Version: v}
		if err := ev.CheckVersion(); !errors.Is(err, events.ErrUnsupportedVersion) {
			t.Errorf("version %d: got %v, want ErrUnsupportedVersion", v, err)
		}
	}
	if _, err := events.Parse([]byte(`{"version":1,"session_id":"s"}`)); !errors.Is(err, events.ErrUnsupportedVersion) {
		t.Errorf("Parse of a first-wave event: got %v, want ErrUnsupportedVersion", err)
	}
	ev := events.Event{Version: events.Version}
	if err := ev.CheckVersion(); err != nil {
		t.Errorf("current version: %v", err)
	}
}
