package projection

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/paddock-dev/paddock/events"
)

// NodeStatus is a node's lifecycle status.
type NodeStatus string

// The node statuses. A node is up once it registers, draining while it
// finishes its commands before stopping, stopped once it says so, and
// lost when the engine declared it gone without a word from it.
const (
	NodeUp       NodeStatus = "up"
	NodeDraining NodeStatus = "draining"
	NodeStopped  NodeStatus = "stopped"
	NodeLost     NodeStatus = "lost"
)

// The node event kinds (events.NodeEvent.Kind).
const (
	KindRegistered = "registered"
	KindDraining   = "draining"
	KindStopped    = "stopped"
	KindLost       = "lost"
	// KindCordoned and KindUncordoned: an operator took the node out of
	// placement, or put it back (engine node cordon, uncordon, drain).
	KindCordoned   = "cordoned"
	KindUncordoned = "uncordoned"
)

// ErrNotRegisteredFirst: a node's first event is not its registration.
var ErrNotRegisteredFirst = errors.New("first event is not a registration")

// Node is the projected state of one node, from its lifecycle events.
// Heartbeats are not events, so a node's liveness between events is the
// scheduler's business, not the projection's.
type Node struct {
	ID           string            `json:"node"`
	Status       NodeStatus        `json:"status"`
	Runtimes     []string          `json:"runtimes,omitempty"`
	Capacity     int               `json:"capacity,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Cordoned     bool              `json:"cordoned,omitempty"`
	RegisteredAt time.Time         `json:"registered_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
}

// ApplyNode returns n with ev applied. A zero n is a node with no events.
// A node may register again from any status (it restarted); draining
// follows up, lost follows up, draining or lost, stopped follows anything. On an
// impossible event it returns n unchanged and an *Error (Session empty,
// Tenant empty, the node's id in Detail).
func ApplyNode(n Node, ev events.NodeEvent) (Node, error) {
	fail := func(kind error, format string, args ...any) (Node, error) {
		return n, &Error{Node: ev.Node, Kind: kind, Detail: fmt.Sprintf(format, args...)}
	}
	if n.ID != "" && ev.Node != n.ID {
		return fail(ErrForeignEvent, "state is of node %s", n.ID)
	}
	if n.ID == "" && ev.Kind != KindRegistered {
		return fail(ErrNotRegisteredFirst, "got %s", ev.Kind)
	}
	next := n
	switch ev.Kind {
	case KindRegistered:
		var d events.NodeInfo
		if len(ev.Data) > 0 {
			_ = json.Unmarshal(ev.Data, &d) // best effort: details only
		}
		next = Node{ID: ev.Node, Status: NodeUp, Runtimes: d.Runtimes, Capacity: d.Capacity, Labels: d.Labels, RegisteredAt: ev.TS}
	case KindDraining:
		if n.Status != NodeUp && n.Status != NodeDraining {
			return fail(ErrBadTransition, "draining from %s", n.Status)
		}
		next.Status = NodeDraining
	case KindLost:
		// Lost again: a node that came back without registering (it was cut
		// off, not restarted) and went silent again.
		if n.Status != NodeUp && n.Status != NodeDraining && n.Status != NodeLost {
			return fail(ErrBadTransition, "lost from %s", n.Status)
		}
		next.Status = NodeLost
	case KindStopped:
		next.Status = NodeStopped
	case KindCordoned, KindUncordoned:
		next.Cordoned = ev.Kind == KindCordoned
	default:
		return fail(ErrBadTransition, "unknown node event kind %q", ev.Kind)
	}
	next.UpdatedAt = ev.TS
	return next, nil
}
