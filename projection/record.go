package projection

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/paddock-dev/paddock/events"
)

// ProblemKind names why a stored event was not applied.
type ProblemKind string

// The problem kinds. The first two are found before Apply runs; the others
// are Apply's *Error kinds.
const (
	ProblemUndecodable        ProblemKind = "undecodable"
	ProblemVersion            ProblemKind = "unsupported_version"
	ProblemSubject            ProblemKind = "subject_mismatch"
	ProblemSeqGap             ProblemKind = "seq_gap"
	ProblemFinishOrphan       ProblemKind = "finish_orphan"
	ProblemBadTransition      ProblemKind = "bad_transition"
	ProblemNotCreatedFirst    ProblemKind = "not_created_first"
	ProblemNotRegisteredFirst ProblemKind = "not_registered_first"
	ProblemForeign            ProblemKind = "foreign_event"
)

// Problem is a stored event that the projection could not apply.
type Problem struct {
	// StreamSeq is the event's sequence in the events stream.
	StreamSeq uint64 `json:"stream_seq"`
	// Subject is set when the subject itself names no session or node.
	Subject string `json:"subject,omitempty"`
	// Seq is the event's per-session seq, when it decoded.
	Seq    uint64      `json:"seq,omitempty"`
	Kind   ProblemKind `json:"kind"`
	Detail string      `json:"detail"`
}

func (p Problem) String() string {
	if p.Seq > 0 {
		return fmt.Sprintf("stream seq %d (seq %d): %s: %s", p.StreamSeq, p.Seq, p.Kind, p.Detail)
	}
	return fmt.Sprintf("stream seq %d: %s: %s", p.StreamSeq, p.Kind, p.Detail)
}

// problemKindOfDecode says whether an event did not decode or is of a
// version this reader does not know.
func problemKindOfDecode(err error) ProblemKind {
	if errors.Is(err, events.ErrUnsupportedVersion) {
		return ProblemVersion
	}
	return ProblemUndecodable
}

// kindOf maps an Apply error to its problem kind.
func kindOf(err error) ProblemKind {
	for _, k := range []struct {
		err  error
		kind ProblemKind
	}{
		{ErrSeqGap, ProblemSeqGap},
		{ErrFinishOrphan, ProblemFinishOrphan},
		{ErrBadTransition, ProblemBadTransition},
		{ErrNotCreatedFirst, ProblemNotCreatedFirst},
		{ErrNotRegisteredFirst, ProblemNotRegisteredFirst},
		{ErrForeignEvent, ProblemForeign},
	} {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return ProblemBadTransition
}

func problemOf(streamSeq uint64, err error) Problem {
	p := Problem{StreamSeq: streamSeq, Kind: kindOf(err), Detail: err.Error()}
	var pe *Error
	if errors.As(err, &pe) {
		p.Seq, p.Detail = pe.Seq, pe.Detail
	}
	return p
}

// MaxProblems bounds the problems a record keeps (the first ones);
// ProblemCount counts them all.
const MaxProblems = 64

// Ledger is the bookkeeping of a record: what it took in, and the events
// it could not apply.
type Ledger struct {
	// StreamSeq is the stream sequence of the last event taken in (applied
	// or recorded as a problem). Events at or below it were taken already:
	// this is what makes the projector idempotent under redelivery.
	StreamSeq uint64 `json:"stream_seq"`
	// Applied counts the events applied.
	Applied      uint64    `json:"applied"`
	ProblemCount uint64    `json:"problem_count,omitempty"`
	Problems     []Problem `json:"problems,omitempty"`
}

func (p *Ledger) add(pr Problem) {
	p.ProblemCount++
	if len(p.Problems) < MaxProblems {
		p.Problems = append(p.Problems[:len(p.Problems):len(p.Problems)], pr)
	}
}

// SessionRecord is a session's projection as the projector stores it in
// the sessions bucket and as replay rebuilds it: the state, the last
// stream sequence taken in, and the events that could not be applied.
type SessionRecord struct {
	Session
	Ledger
}

// Decoded is a stored event with its subject parsed and its body
// decoded: the costly half of taking it in, which can run apart from (and
// in parallel with) the fold itself.
type Decoded struct {
	Msg events.Msg
	// Ref is what the subject names; RefOK is false when it names nothing.
	Ref   events.Ref
	RefOK bool
	// Session or Node is the body, as the subject says which it is. Of a
	// session event only the fields the fold reads are decoded.
	Session events.Event
	Node    events.NodeEvent
	// Err is set when the body does not decode.
	Err error
}

// sessionBody is the part of a session event the fold reads: decoding
// only these fields halves the cost of a rebuild.
type sessionBody struct {
	Version      int             `json:"version"`
	TS           time.Time       `json:"ts"`
	Tenant       string          `json:"tenant"`
	SessionID    string          `json:"session_id"`
	Seq          uint64          `json:"seq"`
	Op           string          `json:"op"`
	Phase        events.Phase    `json:"phase"`
	SpanID       string          `json:"span_id"`
	Node         string          `json:"node"`
	Data         json.RawMessage `json:"data"`
	OK           *bool           `json:"ok"`
	ErrorCode    string          `json:"error_code"`
	ErrorMessage string          `json:"error_message"`
}

// Decode parses m's subject (as subj builds them) and decodes its body.
func Decode(subj events.Subjects, m events.Msg) Decoded {
	d := Decoded{Msg: m}
	d.Ref, d.RefOK = subj.Parse(m.Subject)
	switch {
	case !d.RefOK:
	case d.Ref.IsSession():
		var b sessionBody
		if d.Err = json.Unmarshal(m.Data, &b); d.Err == nil {
			d.Session = events.Event{
				Version: b.Version, TS: b.TS, Tenant: b.Tenant, SessionID: b.SessionID, Seq: b.Seq, Op: b.Op, Phase: b.Phase,
				SpanID: b.SpanID, Node: b.Node, Data: b.Data, OK: b.OK, ErrorCode: b.ErrorCode, ErrorMessage: b.ErrorMessage,
			}
			d.Err = d.Session.CheckVersion()
		}
	default:
		if d.Err = json.Unmarshal(m.Data, &d.Node); d.Err == nil {
			d.Err = d.Node.CheckVersion()
		}
	}
	return d
}

// Take takes in one stored event of this record's session (d's subject
// names it). It returns the new record and true, or r and false when the
// event is at or below r.StreamSeq (already taken in). An event that does
// not decode, whose body disagrees with its subject, or that Apply
// rejects leaves the state as it was and is added to the problems.
func (r SessionRecord) Take(d Decoded) (SessionRecord, bool) {
	m, ref := d.Msg, d.Ref
	if m.StreamSeq <= r.StreamSeq {
		return r, false
	}
	r.StreamSeq = m.StreamSeq
	if r.Tenant == "" && r.ID == "" {
		r.Tenant, r.ID = ref.Tenant, ref.Session
	}
	if d.Err != nil {
		r.add(Problem{StreamSeq: m.StreamSeq, Kind: problemKindOfDecode(d.Err), Detail: d.Err.Error()})
		return r, true
	}
	ev := d.Session
	if ev.Tenant != ref.Tenant || ev.SessionID != ref.Session || ev.Op != ref.Op || ev.Phase != ref.Phase {
		r.add(Problem{StreamSeq: m.StreamSeq, Seq: ev.Seq, Kind: ProblemSubject,
			Detail: fmt.Sprintf("body is %s/%s %s %s, subject %s/%s %s %s", ev.Tenant, ev.SessionID, ev.Op, ev.Phase, ref.Tenant, ref.Session, ref.Op, ref.Phase)})
		return r, true
	}
	next, err := Apply(r.Session, ev)
	if err != nil {
		r.add(problemOf(m.StreamSeq, err))
		return r, true
	}
	r.Session = next
	r.Applied++
	return r, true
}

// NodeRecord is a node's projection as the projector stores it in the
// nodes bucket and as replay rebuilds it.
type NodeRecord struct {
	Node
	Ledger
}

// Take is SessionRecord.Take for a node event.
func (r NodeRecord) Take(d Decoded) (NodeRecord, bool) {
	m, ref := d.Msg, d.Ref
	if m.StreamSeq <= r.StreamSeq {
		return r, false
	}
	r.StreamSeq = m.StreamSeq
	if d.Err != nil {
		r.add(Problem{StreamSeq: m.StreamSeq, Kind: problemKindOfDecode(d.Err), Detail: d.Err.Error()})
		return r, true
	}
	ev := d.Node
	if ev.Node != ref.Node || ev.Kind != ref.Kind {
		r.add(Problem{StreamSeq: m.StreamSeq, Kind: ProblemSubject,
			Detail: fmt.Sprintf("body is %s %s, subject %s %s", ev.Node, ev.Kind, ref.Node, ref.Kind)})
		return r, true
	}
	next, err := ApplyNode(r.Node, ev)
	if err != nil {
		r.add(problemOf(m.StreamSeq, err))
		return r, true
	}
	r.Node = next
	r.Applied++
	return r, true
}

// Take records d, whose subject names no session or node, as a problem.
// It returns false when d is at or below l.StreamSeq (already taken in).
func (l Ledger) Take(d Decoded) (Ledger, bool) {
	m := d.Msg
	if m.StreamSeq <= l.StreamSeq {
		return l, false
	}
	l.StreamSeq = m.StreamSeq
	l.add(Problem{StreamSeq: m.StreamSeq, Subject: m.Subject, Kind: ProblemSubject, Detail: "the subject names no session or node"})
	return l, true
}

// SessionKey is the sessions bucket key of a session: <tenant>.<session>,
// each part kept as it is when it is made of letters, digits, '-' and '_'
// (as UUIDs and most names are), else written as '=' and its unpadded
// base64url form, so that every identifier makes a valid, distinct key.
func SessionKey(tenant, id string) string { return keyToken(tenant) + "." + keyToken(id) }

// TenantKeys is the key filter that matches every session of tenant.
func TenantKeys(tenant string) string { return keyToken(tenant) + ".*" }

// NodeKey is the nodes bucket key of a node (encoded as in SessionKey).
func NodeKey(id string) string { return keyToken(id) }

func keyToken(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	if plain {
		return s
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

// Set is the projection of a whole stream, as replay builds it in memory:
// every session and node record, and the events whose subject names
// neither. The zero Set is not ready; use NewSet.
type Set struct {
	Sessions map[string]SessionRecord `json:"sessions"`
	Nodes    map[string]NodeRecord    `json:"nodes"`
	// Stray records the events whose subject names no session or node.
	Stray Ledger `json:"stray"`
}

// NewSet returns an empty Set.
func NewSet() *Set {
	return &Set{Sessions: map[string]SessionRecord{}, Nodes: map[string]NodeRecord{}}
}

// Take takes in one decoded event, in stream order.
func (s *Set) Take(d Decoded) {
	switch {
	case !d.RefOK:
		s.Stray, _ = s.Stray.Take(d)
	case d.Ref.IsSession():
		k := SessionKey(d.Ref.Tenant, d.Ref.Session)
		s.Sessions[k], _ = s.Sessions[k].Take(d)
	default:
		k := NodeKey(d.Ref.Node)
		s.Nodes[k], _ = s.Nodes[k].Take(d)
	}
}
