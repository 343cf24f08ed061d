package projection

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

// Status is a session's lifecycle status.
type Status string

// The statuses of the state machine in the package doc.
const (
	StatusCreating Status = "creating"
	StatusRunning  Status = "running"
	StatusStopped  Status = "stopped"
	StatusShutDown Status = "shut_down"
	StatusDeleted  Status = "deleted"
	StatusFailed   Status = "failed"
	// StatusLost: the session's node missed its heartbeats past the
	// engine's TTL (the engine recorded node_lost). A resume brings it
	// back on a node that is up; a delete forgets it.
	StatusLost Status = "lost"
)

// Session is the projected state of one session.
type Session struct {
	Tenant  string            `json:"tenant"`
	ID      string            `json:"session_id"`
	Status  Status            `json:"status"`
	Node    string            `json:"node"`
	Runtime string            `json:"runtime,omitempty"`
	Image   string            `json:"image,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// NodeLabels are the create's placement constraints.
	NodeLabels map[string]string `json:"node_labels,omitempty"`
	Epoch      uint64            `json:"epoch"`
	CreatedAt  time.Time         `json:"created_at"`
	UpdatedAt  time.Time         `json:"updated_at"`
	LastSeq    uint64            `json:"last_seq"`
	// ContainerID is the runtime's id of the sandbox, from a finish event's
	// data (container_id); empty until a runtime reports one.
	ContainerID string `json:"container_id,omitempty"`
	// LastSnapshot is the newest workspace snapshot an operation recorded
	// (a finish event's data: snapshot), nil before the first.
	LastSnapshot *Snapshot `json:"last_snapshot,omitempty"`
	// LastError is the newest failed operation, nil when none failed.
	LastError *OpError `json:"last_error,omitempty"`
	// Parent (issue 25) is where a forked session came from (its create
	// start's parent); nil for a session that was created, not forked.
	Parent *commands.Parent `json:"parent,omitempty"`
	// Children (issue 25) are the sessions forked from this one, in the
	// order its fork finishes listed them.
	Children []string `json:"children,omitempty"`
	// InFlight maps the span id of each started, unfinished operation to
	// the operation.
	InFlight map[string]Op `json:"in_flight,omitempty"`
}

// Op is an operation that started and has not finished.
type Op struct {
	Op      string    `json:"op"`
	Seq     uint64    `json:"seq"`
	Started time.Time `json:"started"`
}

// Snapshot names a workspace snapshot in the object store.
type Snapshot struct {
	ID   string `json:"snapshot_id,omitempty"`
	Name string `json:"name"`
	// SHA256 is the workspace's fingerprint (the tar's sha256).
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
}

// OpError is a failed operation: its op, the seq of its finish, and the
// error code and message the finish recorded.
type OpError struct {
	Op      string `json:"op"`
	Seq     uint64 `json:"seq"`
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// Error kinds, matched with errors.Is on an *Error.
var (
	ErrSeqGap          = errors.New("seq gap")
	ErrFinishOrphan    = errors.New("finish without start")
	ErrBadTransition   = errors.New("impossible transition")
	ErrNotCreatedFirst = errors.New("first event is not a create start")
	ErrForeignEvent    = errors.New("event of another session")
)

// Error is an impossible history: which session (or node), at which seq,
// and why.
type Error struct {
	Tenant  string
	Session string
	Seq     uint64
	// Node is set instead of Tenant, Session and Seq for node events.
	Node   string
	Kind   error
	Detail string
}

func (e *Error) Error() string {
	if e.Node != "" {
		return fmt.Sprintf("node %s: %v: %s", e.Node, e.Kind, e.Detail)
	}
	return fmt.Sprintf("session %s/%s seq %d: %v: %s", e.Tenant, e.Session, e.Seq, e.Kind, e.Detail)
}

// Unwrap returns the kind.
func (e *Error) Unwrap() error { return e.Kind }

// finishData is the part of a finish event's data the projection reads,
// by the field names of the events package's data types: a runtime's
// sandbox id (events.StatusFinish, events.ResumeFinish), a snapshot
// (events.SnapshotFinish, events.ForkFinish), a new placement
// (events.ResumeFinish), a fork's children (events.ForkFinish). One
// decode serves every op.
type finishData struct {
	ContainerID string             `json:"container_id"`
	Snapshot    *commands.Snapshot `json:"snapshot"`
	Node        string             `json:"node"`
	Epoch       uint64             `json:"epoch"`
	Children    []string           `json:"children"`
}

// Apply returns s with ev applied. A zero s is a session with no events.
// On an impossible event it returns s unchanged and an *Error.
func Apply(s Session, ev events.Event) (Session, error) {
	fail := func(kind error, format string, args ...any) (Session, error) {
		return s, &Error{Tenant: ev.Tenant, Session: ev.SessionID, Seq: ev.Seq, Kind: kind, Detail: fmt.Sprintf(format, args...)}
	}
	if s.LastSeq == 0 {
		if ev.Op != "create" || ev.Phase != events.PhaseStart {
			return fail(ErrNotCreatedFirst, "got %s %s", ev.Op, ev.Phase)
		}
	} else if ev.Tenant != s.Tenant || ev.SessionID != s.ID {
		return fail(ErrForeignEvent, "state is of %s/%s", s.Tenant, s.ID)
	}
	if ev.Seq != s.LastSeq+1 {
		return fail(ErrSeqGap, "want seq %d", s.LastSeq+1)
	}
	next := s
	next.InFlight = make(map[string]Op, len(s.InFlight)+1)
	for k, v := range s.InFlight {
		next.InFlight[k] = v
	}
	switch ev.Phase {
	case events.PhaseStart:
		if s.Status == StatusDeleted {
			return fail(ErrBadTransition, "%s started after delete", ev.Op)
		}
		if _, dup := next.InFlight[ev.SpanID]; dup {
			return fail(ErrBadTransition, "span %s started twice", ev.SpanID)
		}
		next.InFlight[ev.SpanID] = Op{Op: ev.Op, Seq: ev.Seq, Started: ev.TS}
		if ev.Op == "create" {
			d, _ := events.DecodeData[events.CreateStart](ev) // best effort: details only
			next.Tenant, next.ID, next.Node = ev.Tenant, ev.SessionID, ev.Node
			next.Runtime, next.Image, next.Labels, next.NodeLabels, next.Epoch = d.Runtime, d.Image, d.Labels, d.NodeLabels, d.Epoch
			next.Status, next.CreatedAt = StatusCreating, ev.TS
			next.Parent = d.Parent
		}
	case events.PhaseFinish:
		op, ok := next.InFlight[ev.SpanID]
		if !ok || op.Op != ev.Op {
			return fail(ErrFinishOrphan, "%s finish for span %s", ev.Op, ev.SpanID)
		}
		delete(next.InFlight, ev.SpanID)
		// An exec whose command exited non-zero finishes with ok false,
		// its exit code and no error code: it ran, it did not fail.
		succeeded := (ev.OK != nil && *ev.OK) || (ev.Op == "exec" && ev.ErrorCode == "" && ev.ExitCode != nil)
		if succeeded {
			var d finishData
			if len(ev.Data) > 0 {
				_ = json.Unmarshal(ev.Data, &d) // best effort: details only
			}
			if d.ContainerID != "" {
				next.ContainerID = d.ContainerID
			}
			if sn := d.Snapshot; sn != nil && sn.Name != "" {
				next.LastSnapshot = &Snapshot{ID: sn.ID, Name: sn.Name, SHA256: sn.SHA256, Size: sn.Size}
			}
			if ev.Op == string(commands.OpFork) && len(d.Children) > 0 {
				next.Children = addChildren(s.Children, d.Children)
			}
			if ev.Op == "resume" && d.Node != "" {
				next.Node, next.Epoch = d.Node, d.Epoch
			}
		} else {
			next.LastError = &OpError{Op: ev.Op, Seq: ev.Seq, Code: ev.ErrorCode, Message: ev.ErrorMessage}
		}
		if st, changed := transition(s.Status, ev.Op, succeeded); changed {
			if st == "" {
				return fail(ErrBadTransition, "%s from %s", ev.Op, s.Status)
			}
			next.Status = st
		}
	default:
		return fail(ErrBadTransition, "unknown phase %q", ev.Phase)
	}
	if len(next.InFlight) == 0 {
		next.InFlight = nil
	}
	next.LastSeq = ev.Seq
	next.UpdatedAt = ev.TS
	return next, nil
}

// addChildren returns have with the ids of more it lacks appended (a
// new slice: states share nothing).
func addChildren(have, more []string) []string {
	out := slices.Clone(have)
	for _, c := range more {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// transition returns the status after op finished, whether the op changes
// status at all, and "" when the change is impossible.
func transition(from Status, op string, ok bool) (Status, bool) {
	if op == "create" {
		if ok {
			return StatusRunning, true
		}
		return StatusFailed, true
	}
	if !ok {
		return from, false
	}
	switch op {
	case "start":
		return allow(from, StatusRunning, StatusRunning, StatusStopped)
	case "stop":
		return allow(from, StatusStopped, StatusRunning, StatusStopped)
	case "shutdown":
		return allow(from, StatusShutDown, StatusRunning, StatusStopped, StatusShutDown, StatusFailed, StatusLost)
	case "delete":
		return allow(from, StatusDeleted, StatusRunning, StatusStopped, StatusShutDown, StatusFailed, StatusLost)
	case "resume":
		return allow(from, StatusRunning, StatusRunning, StatusStopped, StatusShutDown, StatusLost)
	case "node_lost":
		return allow(from, StatusLost, StatusRunning, StatusStopped)
	}
	return from, false
}

func allow(from, to Status, valid ...Status) (Status, bool) {
	for _, v := range valid {
		if from == v {
			return to, true
		}
	}
	return "", true
}

// Fold applies evs in order to a zero Session. It skips events that do not
// apply and returns the first such error along with the state.
func Fold(evs []events.Event) (Session, error) {
	var s Session
	var first error
	for _, ev := range evs {
		next, err := Apply(s, ev)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		s = next
	}
	return s, first
}

// LiveProcesses returns the ids of the processes a session's history
// started (an ok proc_start, or one whose finish is missing) and never
// ended (no proc_exit), in ascending order: the processes nobody holds
// once the node that ran them is gone.
func LiveProcesses(evs []events.Event) []int64 {
	started := map[int64]bool{}
	startSeq := map[string]int64{} // span → its start's seq
	for _, ev := range evs {
		switch {
		case ev.Op == string(commands.OpProcStart) && ev.Phase == events.PhaseStart:
			startSeq[ev.SpanID] = int64(ev.Seq)
			started[int64(ev.Seq)] = true
		case ev.Op == string(commands.OpProcStart) && ev.Phase == events.PhaseFinish && (ev.OK == nil || !*ev.OK):
			delete(started, startSeq[ev.SpanID])
		case ev.Op == string(commands.OpProcExit) && ev.Phase == events.PhaseStart:
			if d, err := events.DecodeData[events.ProcRef](ev); err == nil {
				delete(started, d.ProcessID)
			}
		}
	}
	out := make([]int64, 0, len(started))
	for id := range started {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
