package audit

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/paddock-dev/paddock/events"
)

// Kind classifies a finding.
type Kind string

// The kinds of finding. Open and Truncated are reported without failing
// the audit; every other kind is a failure.
const (
	BrokenChain  Kind = "broken_chain"        // prev_hash is not the hash of the previous stored event
	SeqGap       Kind = "seq_gap"             // seq is not the previous seq + 1 (or the first is not 1)
	OrphanFinish Kind = "orphan_finish"       // a finish with no open start of its span and op
	DoubleStart  Kind = "double_start"        // a start for a span already open
	Undecodable  Kind = "undecodable"         // the stored bytes are not an event
	Version      Kind = "unsupported_version" // an event of a schema version this audit does not know
	Mismatch     Kind = "subject_mismatch"
	Stray        Kind = "stray"      // a subject that names no session
	NotHolder    Kind = "not_holder" // written by a node that did not hold the session then
	Open         Kind = "open"       // a start without its finish (yet)
	Truncated    Kind = "truncated"
)

// Failure reports whether a finding of kind k fails the audit.
func (k Kind) Failure() bool { return k != Open && k != Truncated }

// Finding is one thing the audit found, located by session and seq.
type Finding struct {
	Tenant    string `json:"tenant,omitempty"`
	Session   string `json:"session_id,omitempty"`
	Seq       uint64 `json:"seq,omitempty"`
	StreamSeq uint64 `json:"stream_seq"`
	Kind      Kind   `json:"kind"`
	Detail    string `json:"detail"`
}

func (f Finding) String() string {
	where := "stream"
	if f.Session != "" {
		where = fmt.Sprintf("session %s/%s", f.Tenant, f.Session)
	}
	if f.Seq > 0 {
		where += fmt.Sprintf(" seq %d", f.Seq)
	}
	return fmt.Sprintf("%s (stream seq %d): %s: %s", where, f.StreamSeq, f.Kind, f.Detail)
}

type open struct {
	op        string
	seq       uint64
	streamSeq uint64
	started   time.Time
}

// chain is what the checker remembers of one session.
type chain struct {
	tenant, id string
	// holder is the node that holds the session: the one whose create or
	// resume start came last.
	holder   string
	events   int
	lastHash string
	lastSeq  uint64
	open     map[string]open // by span id
}

// Checker checks sessions' histories. Feed it messages in stream order.
type Checker struct {
	subj     events.Subjects
	firstSeq uint64
	sessions map[string]*chain
	order    []*chain
	findings []Finding
	events   int
	// trust, registered and signers are the signature check's (signature.go).
	trust      Trust
	registered map[string]map[string]bool
	signers    map[[2]string]*Signer
	// nodes are the writers that registered as nodes; engines those that
	// declared a node lost (signature.go).
	nodes, engines map[string]bool
	// lineage is the fork check's (lineage.go).
	lineage lineage
}

// NewChecker returns a checker for a stream whose subjects subj builds and
// whose first stored sequence is firstSeq (above 1 when retention dropped
// events: a session whose history starts after seq 1 is then reported as
// truncated rather than broken).
func NewChecker(subj events.Subjects, firstSeq uint64) *Checker {
	return &Checker{subj: subj, firstSeq: firstSeq, sessions: map[string]*chain{}}
}

func (c *Checker) find(f Finding) { c.findings = append(c.findings, f) }

// Check takes in one stored message. Node events are not checked; a
// node's signed registered event makes its signing key known (Trust).
func (c *Checker) Check(m events.Msg) {
	ref, ok := c.subj.Parse(m.Subject)
	if ok && !ref.IsSession() {
		c.noteNodeEvent(m)
		return
	}
	c.events++
	if !ok {
		c.find(Finding{StreamSeq: m.StreamSeq, Kind: Stray, Detail: fmt.Sprintf("subject %q names no session", m.Subject)})
		return
	}
	key := ref.Tenant + "\x00" + ref.Session
	ch := c.sessions[key]
	if ch == nil {
		ch = &chain{tenant: ref.Tenant, id: ref.Session, open: map[string]open{}}
		c.sessions[key] = ch
		c.order = append(c.order, ch)
	}
	f := Finding{Tenant: ch.tenant, Session: ch.id, StreamSeq: m.StreamSeq}
	first := ch.events == 0
	prevHash := ch.lastHash
	ch.events++
	ch.lastHash = events.Hash(m.Data)

	var ev events.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		f.Kind, f.Detail = Undecodable, err.Error()
		c.find(f)
		return
	}
	if err := ev.CheckVersion(); err != nil {
		// Its fields may not mean what this audit reads them as: only the
		// chain (over stored bytes) is checked past it.
		f.Seq, f.Kind, f.Detail = ev.Seq, Version, err.Error()
		c.find(f)
		return
	}
	f.Seq = ev.Seq
	c.checkSignature(m, ev, f)
	c.checkHolder(ch, ev, f)
	if ev.Tenant != ref.Tenant || ev.SessionID != ref.Session || ev.Op != ref.Op || ev.Phase != ref.Phase {
		f.Kind, f.Detail = Mismatch, fmt.Sprintf("body is %s/%s %s %s, subject %s", ev.Tenant, ev.SessionID, ev.Op, ev.Phase, m.Subject)
		c.find(f)
	}

	switch {
	case first && ev.Seq != 1 && c.firstSeq > 1:
		// The stream no longer holds the session's beginning: check from here.
		f.Kind, f.Detail = Truncated, fmt.Sprintf("history starts at seq %d; the stream's retention dropped what came before (stream starts at %d)", ev.Seq, c.firstSeq)
		c.find(f)
	default:
		if ev.PrevHash != prevHash {
			want := prevHash
			if want == "" {
				want = "(none: first event)"
			}
			f.Kind, f.Detail = BrokenChain, fmt.Sprintf("prev_hash %s, but the previous stored event hashes to %s", orNone(ev.PrevHash), want)
			c.find(f)
		}
		if ev.Seq != ch.lastSeq+1 {
			f.Kind, f.Detail = SeqGap, fmt.Sprintf("seq %d follows seq %d", ev.Seq, ch.lastSeq)
			c.find(f)
		}
	}
	if ev.Seq > ch.lastSeq {
		ch.lastSeq = ev.Seq
	}

	c.noteLineage(ch, ev, m.StreamSeq)
	switch ev.Phase {
	case events.PhaseStart:
		if o, dup := ch.open[ev.SpanID]; dup {
			f.Kind, f.Detail = DoubleStart, fmt.Sprintf("%s span %s started again (first at seq %d)", ev.Op, ev.SpanID, o.seq)
			c.find(f)
			return
		}
		ch.open[ev.SpanID] = open{op: ev.Op, seq: ev.Seq, streamSeq: m.StreamSeq, started: ev.TS}
	case events.PhaseFinish:
		o, ok := ch.open[ev.SpanID]
		if !ok || o.op != ev.Op {
			f.Kind, f.Detail = OrphanFinish, fmt.Sprintf("%s finish for span %s, which has no open start (a second finish, or a finish without a start)", ev.Op, ev.SpanID)
			c.find(f)
			return
		}
		delete(ch.open, ev.SpanID)
	default:
		f.Kind, f.Detail = Mismatch, fmt.Sprintf("unknown phase %q", ev.Phase)
		c.find(f)
	}
}

// checkHolder reports an event written by another node than the one that
// holds the session. A node takes a session with its create or resume
// start; before its resume start, a node taking a session over may close
// the old node's open operations (failed finishes, unavailable). An
// engine (a writer that declared a node lost) may end a lost node's hold:
// its node_lost start releases the session (no node holds it until a
// resume), and it may then record the lost node's processes' ends and
// delete the session; an engine may also delete a session whose node is
// gone (shut down or failed there). A node may do none of that.
func (c *Checker) checkHolder(ch *chain, ev events.Event, f Finding) {
	taking := ev.Phase == events.PhaseStart && (ev.Op == "create" || ev.Op == "resume")
	closing := ev.Phase == events.PhaseFinish && ev.OK != nil && !*ev.OK && ev.ErrorCode == "unavailable"
	engine := c.isEngine(ev.Node)
	switch {
	case taking:
		ch.holder = ev.Node
	case engine && (ev.Op == "node_lost" || ev.Op == "delete") && ev.Phase == events.PhaseStart:
		ch.holder = ""
	case ch.holder != "" && ev.Node != ch.holder && !closing:
		f.Kind, f.Detail = NotHolder, fmt.Sprintf("%s %s by node %s, but node %s holds the session", ev.Op, ev.Phase, orNone(ev.Node), ch.holder)
		c.find(f)
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Report is the outcome of an audit.
type Report struct {
	Sessions int       `json:"sessions"`
	Events   int       `json:"events"`
	Findings []Finding `json:"findings,omitempty"`
	// Signers says which node signed how many events, with which key.
	Signers []Signer `json:"signers,omitempty"`
}

// Failed reports whether any finding fails the audit.
func (r Report) Failed() bool {
	for _, f := range r.Findings {
		if f.Kind.Failure() {
			return true
		}
	}
	return false
}

// Report returns the findings so far, with every operation still open,
// ordered by stream sequence.
func (c *Checker) Report() Report {
	r := Report{Sessions: len(c.order), Events: c.events, Findings: append([]Finding(nil), c.findings...), Signers: c.signerList()}
	r.Findings = append(r.Findings, c.lineageFindings()...)
	for _, ch := range c.order {
		for span, o := range ch.open {
			r.Findings = append(r.Findings, Finding{
				Tenant: ch.tenant, Session: ch.id, Seq: o.seq, StreamSeq: o.streamSeq, Kind: Open,
				Detail: fmt.Sprintf("%s (span %s) started at %s and has no finish", o.op, span, o.started.UTC().Format(time.RFC3339)),
			})
		}
	}
	sort.SliceStable(r.Findings, func(i, j int) bool { return r.Findings[i].StreamSeq < r.Findings[j].StreamSeq })
	return r
}
