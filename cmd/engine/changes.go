package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/paddock-dev/paddock/commands"
)

// shownPaths is how many changed paths a finish line shows.
const shownPaths = 3

// formatChanges renders the changes a finish event's data records (any
// op's: exec, proc_exit, write, rm, mkdir, hydrate), "" when it records
// none: counts created (+), modified (~) and removed (-), bytes written
// and the first paths, e.g.
//
//	changes +3 ~1 -0 1.2 KiB [a.txt, b/c.txt, ...]
//
// "changes+" says the counts are a floor (Truncated: more paths than
// recorded, or a watch that lost events), "(approx)" that other
// processes ran meanwhile (Overlapped). Paths a sandbox chose are quoted
// when they hold anything but printable characters, so that none can
// write to the terminal.
func formatChanges(data json.RawMessage) string {
	var d struct {
		Changes *commands.Changes `json:"changes"`
	}
	if len(data) == 0 || json.Unmarshal(data, &d) != nil || d.Changes == nil {
		return ""
	}
	c := d.Changes
	var b strings.Builder
	b.WriteString("changes")
	if c.Truncated {
		b.WriteString("+")
	}
	fmt.Fprintf(&b, " +%d ~%d -%d", c.Created, c.Modified, c.Removed)
	if c.BytesWritten > 0 {
		fmt.Fprintf(&b, " %s", humanBytes(uint64(c.BytesWritten)))
	}
	if len(c.Paths) > 0 {
		var ps []string
		for i, p := range c.Paths {
			if i == shownPaths {
				ps = append(ps, "...")
				break
			}
			ps = append(ps, shownPath(p.Path))
		}
		if len(c.Paths) <= shownPaths && c.Created+c.Modified+c.Removed > len(c.Paths) {
			ps = append(ps, "...")
		}
		fmt.Fprintf(&b, " [%s]", strings.Join(ps, ", "))
	}
	if c.Overlapped {
		b.WriteString(" (approx)")
	}
	return b.String()
}

// shownPath is p as a line shows it: quoted unless it is printable and
// holds no separator of the list.
func shownPath(p string) string {
	if q := strconv.QuoteToGraphic(p); q[1:len(q)-1] != p || strings.ContainsAny(p, ", []") || p == "" {
		return q
	}
	return p
}
