package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

// TestFormatChanges: finish lines show counts, bytes, the first paths,
// "+" when truncated and (approx) when overlapped; a hostile path cannot
// write control characters to the terminal.
func TestFormatChanges(t *testing.T) {
	ok := true
	line := func(c *commands.Changes) string {
		data, err := json.Marshal(events.ExecFinish{Changes: c})
		if err != nil {
			t.Fatal(err)
		}
		return formatEvent(events.Event{Op: "exec", Phase: events.PhaseFinish, OK: &ok, Data: data})
	}
	for _, tc := range []struct {
		c    *commands.Changes
		want string
	}{
		{&commands.Changes{Created: 2, Modified: 1, BytesWritten: 1229, Paths: []commands.ChangedPath{
			{Path: "a.txt", Change: "created"}, {Path: "b/c.txt", Change: "created"}, {Path: "d", Change: "modified"}}},
			" ok changes +2 ~1 -0 1.2 KiB [a.txt, b/c.txt, d]"},
		{&commands.Changes{Created: 40, Truncated: true, Overlapped: true, Paths: []commands.ChangedPath{
			{Path: "1"}, {Path: "2"}, {Path: "3"}, {Path: "4"}}},
			" ok changes+ +40 ~0 -0 [1, 2, 3, ...] (approx)"},
		{&commands.Changes{Removed: 1, Paths: []commands.ChangedPath{{Path: "x\x1b[2J, y"}}},
			` ok changes +0 ~0 -1 ["x\x1b[2J, y"]`},
	} {
		if got := line(tc.c); !strings.HasSuffix(got, tc.want) {
			t.Errorf("got %q, want it to end with %q", got, tc.want)
		}
	}
	if got := line(nil); strings.Contains(got, "changes") {
		t.Errorf("no changes recorded, got %q", got)
	}
}
