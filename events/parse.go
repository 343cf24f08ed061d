package events

import (
	"strconv"
	"strings"
)

// Ref is what an event subject names: a session event (Tenant, Session,
// Op, Phase) or a node event (Node, Kind).
type Ref struct {
	Tenant  string
	Session string
	Op      string
	Phase   Phase
	Node    string
	Kind    string
	// Partition is the partition a session event's subject names (0 for
	// an unpartitioned log's).
	Partition int
}

// IsSession reports whether r names a session event.
func (r Ref) IsSession() bool { return r.Session != "" }

// Parse reads a subject of the events stream. It returns false for a
// subject that is neither <prefix>.evt.<tenant>.<session>.<op>.<phase>,
// <prefix>.pevt.<partition>.<tenant>.<session>.<op>.<phase> (a partition
// in range of s) nor <prefix>.nodeevt.<node>.<kind>, such as one published
// by hand with too few tokens.
func (s Subjects) Parse(subject string) (Ref, bool) {
	rest, ok := strings.CutPrefix(subject, s.prefix()+".")
	if !ok {
		return Ref{}, false
	}
	tok := strings.Split(rest, ".")
	for _, t := range tok {
		if t == "" {
			return Ref{}, false
		}
	}
	switch {
	case len(tok) == 5 && tok[0] == "evt":
		return Ref{Tenant: tok[1], Session: tok[2], Op: tok[3], Phase: Phase(tok[4])}, true
	case len(tok) == 6 && tok[0] == "pevt":
		k, err := strconv.Atoi(tok[1])
		if err != nil || k < 0 || k >= s.parts() || strconv.Itoa(k) != tok[1] {
			return Ref{}, false
		}
		return Ref{Tenant: tok[2], Session: tok[3], Op: tok[4], Phase: Phase(tok[5]), Partition: k}, true
	case len(tok) == 3 && tok[0] == "nodeevt":
		return Ref{Node: tok[1], Kind: tok[2]}, true
	}
	return Ref{}, false
}
