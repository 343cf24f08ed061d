package nodes

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"sync"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

// Bounds of a session's memory of command outcomes.
const (
	// maxRemembered is how many command ids a session remembers.
	maxRemembered = 1024
	// maxRememberedBytes bounds the first replies kept whole; beyond it
	// the oldest keep only their finish event, and a retry of them gets
	// the outcome rebuilt from it.
	maxRememberedBytes = 8 << 20
)

// memory is a session's record of the commands it ran, by command id, so
// that a retry gets the first outcome and runs nothing (invariant 4). A
// command id names one op on one session. The memory is seeded from the
// session's events when a node takes a session up (after a restart, or a
// resume on another node), so it survives both: what the events did not
// record (exec output beyond the capture policy, a read's content) is
// then absent from the rebuilt reply, which says replayed.
type memory struct {
	mu      sync.Mutex
	entries map[string]*remembered
	order   []string // command ids, oldest first
	bytes   int      // sum of len(reply) over entries
}

// remembered is one command's outcome.
type remembered struct {
	op     commands.Op
	digest [sha256.Size]byte // of the request's args; zero when seeded from events
	done   chan struct{}     // closed once the outcome is known
	reply  []byte            // the first reply, if kept
	finish *events.Event     // the finish event, to rebuild a reply from
	create *events.Event     // for a create, its start event (the result names the runtime)
}

func (m *memory) init() { m.entries = map[string]*remembered{} }

// claim returns a new slot for id when the session has not seen it, or the
// earlier one. A different op or different args under a seen id is
// invalid_request.
func (m *memory) claim(id string, op commands.Op, digest [sha256.Size]byte) (slot *remembered, seen bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.entries[id]; ok {
		if err := r.check(id, op, digest); err != nil {
			return nil, true, err
		}
		return r, true, nil
	}
	r := &remembered{op: op, digest: digest, done: make(chan struct{})}
	m.add(id, r)
	return r, false, nil
}

// lookup returns the outcome remembered under id, or nil; a different op
// or different args under id is invalid_request.
func (m *memory) lookup(id string, op commands.Op, digest [sha256.Size]byte) (*remembered, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.entries[id]
	if !ok {
		return nil, nil
	}
	return r, r.check(id, op, digest)
}

// check returns invalid_request unless r was remembered for op with args
// of this digest (a digest is unknown for outcomes seeded from events).
func (r *remembered) check(id string, op commands.Op, digest [sha256.Size]byte) error {
	if r.op != op {
		return errcode.New(errcode.InvalidRequest, "command id %s was used for %s on this session; a command id names one op", id, r.op)
	}
	if r.digest != ([sha256.Size]byte{}) && r.digest != digest {
		return errcode.New(errcode.InvalidRequest, "command id %s was used with other arguments; a retry must send the same request", id)
	}
	return nil
}

// add records r under id, evicting the oldest beyond the bounds. m.mu is
// held.
func (m *memory) add(id string, r *remembered) {
	m.entries[id] = r
	m.order = append(m.order, id)
	if len(m.order) > maxRemembered {
		old := m.order[0]
		m.order = m.order[1:]
		if e := m.entries[old]; e != nil {
			m.bytes -= len(e.reply)
		}
		delete(m.entries, old)
	}
}

// settle records the outcome of a claimed slot: the reply, and the finish
// event when one was appended. A command whose start was never recorded
// (it was refused before it ran) is forgotten, so that a retry runs it.
func (m *memory) settle(id string, r *remembered, reply []byte, fin *events.Event, recorded bool) {
	m.mu.Lock()
	if !recorded {
		if m.entries[id] == r {
			delete(m.entries, id)
			if i := slices.Index(m.order, id); i >= 0 {
				m.order = slices.Delete(m.order, i, i+1) // not counted against the bound
			}
		}
		r.reply = reply
		m.mu.Unlock()
		close(r.done)
		return
	}
	r.reply, r.finish = reply, fin
	m.bytes += len(reply)
	for i := 0; m.bytes > maxRememberedBytes && i < len(m.order); i++ {
		if e := m.entries[m.order[i]]; e != nil && e.reply != nil && e.finish != nil {
			m.bytes -= len(e.reply)
			e.reply = nil
		}
	}
	m.mu.Unlock()
	close(r.done)
}

// await waits for r's outcome and returns its reply: the first reply when
// kept, else one rebuilt from the finish event.
func (r *remembered) await(ctx context.Context, node string) []byte {
	select {
	case <-r.done:
	case <-ctx.Done():
		return commands.ErrorReply(errcode.New(errcode.Unavailable, "node %s is shutting down", node))
	}
	if r.reply != nil {
		return r.reply
	}
	if r.finish != nil {
		return replayReply(r.create, *r.finish)
	}
	return commands.ErrorReply(errcode.New(errcode.Internal, "the outcome of this command was not kept"))
}

// recordFinish remembers a finish event the node appended outside an op
// (an operation a restart cut short), unless its command id is known.
func (m *memory) recordFinish(fin events.Event) {
	if fin.CommandID == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[fin.CommandID]; ok {
		return
	}
	r := &remembered{op: commands.Op(fin.Op), done: make(chan struct{}), finish: &fin}
	close(r.done)
	m.add(fin.CommandID, r)
}

// seed remembers the outcome of every command the events finished (the
// newest maxRemembered).
func (m *memory) seed(evs []events.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var create *events.Event
	for i := range evs {
		ev := &evs[i]
		if ev.Op == string(commands.OpCreate) && ev.Phase == events.PhaseStart {
			create = ev
		}
		if ev.Phase != events.PhaseFinish || ev.CommandID == "" {
			continue
		}
		if _, ok := m.entries[ev.CommandID]; ok {
			continue
		}
		r := &remembered{op: commands.Op(ev.Op), done: make(chan struct{}), finish: ev}
		if r.op == commands.OpCreate {
			r.create = create
		}
		close(r.done)
		m.add(ev.CommandID, r)
	}
}

// argsDigest is the digest a command's args are remembered by.
func argsDigest(raw json.RawMessage) [sha256.Size]byte {
	return sha256.Sum256(raw)
}

// replayReply rebuilds a reply from an operation's finish event (and, for
// a create, its start): the error it recorded, or a result from the
// finish data, whose fields carry the result's names. Output and content
// the events did not record are absent. The reply says replayed.
func replayReply(create *events.Event, fin events.Event) []byte {
	if fin.OK != nil && !*fin.OK && fin.ErrorCode != "" {
		b := commands.ErrorReply(errcode.New(errcode.Code(fin.ErrorCode), "%s", fin.ErrorMessage))
		return markReplayed(b)
	}
	var result any = fin.Data
	switch commands.Op(fin.Op) {
	case commands.OpExec:
		d, _ := events.DecodeData[events.ExecFinish](fin)
		r := commands.ExecResult{
			Stdout: fin.Stdout, StdoutEncoding: fin.StdoutEncoding, Stderr: fin.Stderr, StderrEncoding: fin.StderrEncoding,
			StdoutBytes: d.StdoutBytes, StderrBytes: d.StderrBytes,
			StdoutTruncated: fin.StdoutTruncated || int64(len(fin.Stdout)) < d.StdoutBytes,
			StderrTruncated: fin.StderrTruncated || int64(len(fin.Stderr)) < d.StderrBytes,
		}
		if fin.ExitCode != nil {
			r.ExitCode = *fin.ExitCode
		}
		if fin.DurationMS != nil {
			r.DurationMS = *fin.DurationMS
		}
		result = r
	case commands.OpCreate:
		d, _ := events.DecodeData[events.StatusFinish](fin)
		r := commands.CreateResult{SessionID: fin.SessionID, Node: fin.Node, Status: d.Status}
		if create != nil {
			cs, _ := events.DecodeData[events.CreateStart](*create)
			r.Runtime = cs.Runtime
		}
		result = r
	case commands.OpProcStart, commands.OpProcWrite, commands.OpProcRead:
		// The output is there only as far as the capture policy kept it.
		d, _ := events.DecodeData[events.ProcUpdate](fin)
		result = commands.ProcResult{ProcessID: d.ProcessID, Output: fin.Stdout, OutputEncoding: fin.StdoutEncoding,
			DroppedBytes: d.DroppedBytes, Running: d.Running, ExitCode: d.ExitCode}
	case commands.OpRm, commands.OpMkdir, commands.OpProcResize, commands.OpProcSignal:
		result = struct{}{}
	}
	if raw, ok := result.(json.RawMessage); ok && len(raw) == 0 {
		result = struct{}{}
	}
	b, err := commands.ResultReply(result)
	if err != nil {
		return commands.ErrorReply(err)
	}
	return markReplayed(b)
}

// markReplayed sets a reply's replayed flag.
func markReplayed(b []byte) []byte {
	var rep commands.Reply
	if json.Unmarshal(b, &rep) != nil {
		return b
	}
	rep.Replayed = true
	out, err := json.Marshal(rep)
	if err != nil {
		return b
	}
	return out
}
