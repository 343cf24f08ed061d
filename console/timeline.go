package console

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

// Op is one operation of a session's timeline: its start event and its
// finish event (nil while it is open), paired by span id.
type Op struct {
	Seq       uint64
	StreamSeq uint64
	Op        string
	Span      string
	Actor     string
	Node      string
	Started   time.Time
	// Finished is zero while the op is open.
	Finished   time.Time
	DurationMS *float64
	OK         *bool
	ExitCode   *int
	ErrorCode  string
	ErrorMsg   string
	// Summary says what the op was about in one line (argv, path, the
	// egress destination and decision, the process, the fork's children).
	Summary string
	// Egress is the decision of an egress op ("allowed", "refused"; empty
	// for other ops).
	Egress string
	// Process is the process id a proc_* op names (0: none).
	Process int64
	// Changes is what the op changed in the workspace, when recorded.
	Changes *commands.Changes
	// Children are the sessions a fork made; Parent where a forked
	// session's create came from.
	Children []string
	Parent   *commands.Parent
	// StartData and FinishData are the events' data as stored.
	StartData, FinishData string
	// Signed says both events carry a signature header.
	Signed bool
	// Undecodable holds the decode error of a stored message that is not
	// an event (the rest of the row is empty).
	Undecodable string
}

// Open reports whether the op has no finish yet.
func (o Op) Open() bool { return o.Finished.IsZero() && o.Undecodable == "" }

// Outcome is "ok", "failed", "open" or "undecodable".
func (o Op) Outcome() string {
	switch {
	case o.Undecodable != "":
		return "undecodable"
	case o.Open():
		return "open"
	case o.OK != nil && !*o.OK:
		return "failed"
	}
	return "ok"
}

// Timeline pairs a session's stored events (in stream order) into ops,
// ordered by their start's seq. It never fails: a message that does not
// decode becomes an op with Undecodable set, a finish without its start an
// op of its own.
func Timeline(msgs []events.Msg) []Op {
	var ops []Op
	bySpan := map[string]int{}
	for _, m := range msgs {
		ev, err := m.Decode()
		if err != nil {
			ops = append(ops, Op{StreamSeq: m.StreamSeq, Undecodable: err.Error()})
			continue
		}
		signed := m.Sig != ""
		if ev.Phase == events.PhaseStart {
			o := Op{Seq: ev.Seq, StreamSeq: m.StreamSeq, Op: ev.Op, Span: ev.SpanID, Actor: ev.Actor, Node: ev.Node,
				Started: ev.TS, StartData: string(ev.Data), Signed: signed}
			describeStart(&o, ev)
			bySpan[ev.SpanID] = len(ops)
			ops = append(ops, o)
			continue
		}
		i, ok := bySpan[ev.SpanID]
		if !ok || !ops[i].Finished.IsZero() {
			ops = append(ops, Op{Seq: ev.Seq, StreamSeq: m.StreamSeq, Op: ev.Op, Span: ev.SpanID, Actor: ev.Actor, Node: ev.Node, Signed: signed})
			i = len(ops) - 1
		}
		o := &ops[i]
		o.Finished, o.DurationMS, o.OK, o.ExitCode = ev.TS, ev.DurationMS, ev.OK, ev.ExitCode
		o.ErrorCode, o.ErrorMsg, o.FinishData = ev.ErrorCode, ev.ErrorMessage, string(ev.Data)
		o.Signed = o.Signed && signed
		describeFinish(o, ev)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].StreamSeq < ops[j].StreamSeq })
	return ops
}

// describeStart fills the summary of an op from its start's data.
func describeStart(o *Op, ev events.Event) {
	if len(ev.Data) == 0 {
		return
	}
	switch ev.Op {
	case string(commands.OpExec):
		var d events.ExecStart
		if json.Unmarshal(ev.Data, &d) == nil {
			o.Summary = strings.Join(d.Argv, " ")
		}
	case "proc_start":
		var d events.ProcStart
		if json.Unmarshal(ev.Data, &d) == nil {
			o.Summary = strings.Join(d.Argv, " ")
		}
	case "egress":
		var d events.EgressStart
		if json.Unmarshal(ev.Data, &d) == nil {
			o.Egress = "refused"
			if d.Allowed {
				o.Egress = "allowed"
			}
			o.Summary = fmt.Sprintf("%s %s:%d %s", d.Method, d.Host, d.Port, o.Egress)
			if d.Rule != "" {
				o.Summary += " by " + d.Rule
			}
			if d.Reason != "" {
				o.Summary += ": " + d.Reason
			}
		}
	case string(commands.OpFork):
		var d events.ForkStart
		if json.Unmarshal(ev.Data, &d) == nil {
			o.Children = d.Children
		}
	case string(commands.OpCreate):
		var d events.CreateStart
		if json.Unmarshal(ev.Data, &d) == nil {
			o.Summary = strings.TrimSpace(d.Runtime + " " + d.Image)
			o.Parent = d.Parent
		}
	default:
		// Every op that names a path, or a process, names it so.
		var d struct {
			Path      string `json:"path"`
			ProcessID int64  `json:"process_id"`
			Signal    string `json:"signal"`
		}
		if json.Unmarshal(ev.Data, &d) == nil {
			o.Summary = strings.TrimSpace(d.Path + " " + d.Signal)
			o.Process = d.ProcessID
		}
	}
}

// describeFinish adds what the finish's data says: changes, processes,
// a fork's children, a snapshot.
func describeFinish(o *Op, ev events.Event) {
	if len(ev.Data) == 0 {
		return
	}
	var d struct {
		Changes   *commands.Changes  `json:"changes"`
		ProcessID int64              `json:"process_id"`
		Children  []string           `json:"children"`
		Snapshot  *commands.Snapshot `json:"snapshot"`
		Reason    string             `json:"reason"`
	}
	if json.Unmarshal(ev.Data, &d) != nil {
		return
	}
	o.Changes = d.Changes
	if d.ProcessID != 0 {
		o.Process = d.ProcessID
	}
	if len(d.Children) > 0 {
		o.Children = d.Children
	}
	if d.Snapshot != nil && o.Summary == "" {
		o.Summary = "snapshot " + d.Snapshot.ID
	}
	if d.Reason != "" {
		o.Summary = strings.TrimSpace(o.Summary + " (" + d.Reason + ")")
	}
}
