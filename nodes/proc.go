package nodes

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/projection"
)

// Why a process ended (events.ProcExitFinish.Reason).
const (
	ProcExited  = "exited"  // by itself
	ProcKilled  = "killed"  // after a proc_signal
	ProcStopped = "stopped" // the session stopped, shut down or was deleted
	ProcReaped  = "reaped"  // idle past Config.ProcIdleTimeout, or pushed out by the limit
	ProcLost    = "lost"    // the node restarted while it ran
)

// procDrain bounds how long a process's output is still read once it has
// exited: something that left its session may hold the output open.
const procDrain = 2 * time.Second

// procs is a session's processes. Its lock is taken after session.mu is
// released, never with it held.
type procs struct {
	mu      sync.Mutex
	limit   int
	all     map[int64]*proc
	closing string // why new processes are refused, once the session stops
}

// proc is one process of a session: the runtime's process, the output it
// produced and nobody has read yet (at most bufMax bytes, the oldest
// dropped first), and how it ended.
type proc struct {
	id      int64
	info    commands.ProcInfo // argv as recorded
	p       runtime.Process
	bufMax  int
	stopped chan struct{} // closed once its proc_exit is recorded

	mu       sync.Mutex
	buf      []byte
	dropped  int64 // since the last read
	total    int64
	outDone  bool
	exited   bool
	code     int
	reason   string // set with exited
	signaled bool   // a proc_signal was sent
	ending   string // a reason the node set before it ended it
	lastUsed time.Time
	changed  chan struct{} // closed (and replaced) on every change
}

// add registers a started process, pushing out the least recently used
// exited one (or, failing that, the least recently used running one) when
// the table is full. It returns the process pushed out, if any.
func (t *procs) add(p *proc) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing != "" {
		return nil, errcode.New(errcode.InvalidState, "proc_start: the session is %s", t.closing)
	}
	if t.all == nil {
		t.all = map[int64]*proc{}
	}
	var out *proc
	if len(t.all) >= t.limit {
		out = t.victim()
		if out == nil {
			return nil, errcode.New(errcode.QuotaExceeded, "the session holds %d processes, its limit", t.limit)
		}
		delete(t.all, out.id)
	}
	t.all[p.id] = p
	return out, nil
}

// victim picks the process to push out: the least recently used exited
// one, else the least recently used running one. t.mu is held.
func (t *procs) victim() *proc {
	var exited, running *proc
	for _, p := range t.all {
		p.mu.Lock()
		used, ex := p.lastUsed, p.exited
		p.mu.Unlock()
		if ex && (exited == nil || used.Before(exited.lastUsedNow())) {
			exited = p
		}
		if !ex && (running == nil || used.Before(running.lastUsedNow())) {
			running = p
		}
	}
	if exited != nil {
		return exited
	}
	return running
}

func (p *proc) lastUsedNow() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastUsed
}

// get returns process id, or not_found.
func (t *procs) get(id int64) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.all[id]
	if !ok {
		return nil, errcode.New(errcode.NotFound, "no process %d in the session (it never ran here, or its exit was read and it was forgotten)", id)
	}
	return p, nil
}

// forget drops a process whose exit has been read.
func (t *procs) forget(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.all[p.id] == p {
		delete(t.all, p.id)
	}
}

// list returns every process, by id.
func (t *procs) list() []*proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*proc, 0, len(t.all))
	for _, p := range t.all {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// end refuses new processes (why: the session's state), ends every
// running one with reason and waits (within ctx) until each has recorded
// its proc_exit. With why empty, processes are allowed again (a start
// after a stop).
func (t *procs) end(ctx context.Context, why, reason string) {
	t.mu.Lock()
	t.closing = why
	ps := make([]*proc, 0, len(t.all))
	for _, p := range t.all {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	for _, p := range ps {
		p.kill(reason)
	}
	for _, p := range ps {
		select {
		case <-p.stopped:
		case <-ctx.Done():
			return
		}
	}
}

// reopen allows new processes again.
func (t *procs) reopen() {
	t.mu.Lock()
	t.closing = ""
	t.mu.Unlock()
}

// idle returns the processes nobody has used since before.
func (t *procs) idle(before time.Time) []*proc {
	var out []*proc
	for _, p := range t.list() {
		if p.lastUsedNow().Before(before) {
			out = append(out, p)
		}
	}
	return out
}

// notify wakes the readers waiting on p. p.mu is held.
func (p *proc) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// pump reads p's output into its buffer until the output ends.
func (p *proc) pump() {
	b := make([]byte, 32<<10)
	for {
		n, err := p.p.Read(b)
		p.mu.Lock()
		if n > 0 {
			p.total += int64(n)
			p.buf = append(p.buf, b[:n]...)
			if over := len(p.buf) - p.bufMax; over > 0 {
				p.dropped += int64(over)
				p.buf = append(p.buf[:0], p.buf[over:]...)
			}
		}
		if err != nil {
			p.outDone = true
		}
		p.notify()
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// kill ends p for reason (unless it ended by itself first).
func (p *proc) kill(reason string) {
	p.mu.Lock()
	if p.exited {
		p.mu.Unlock()
		return
	}
	if p.ending == "" {
		p.ending = reason
	}
	p.mu.Unlock()
	_ = p.p.Close()
}

// watch waits for p to exit and for its output to end (within procDrain),
// then records its proc_exit.
func (a *Agent) watch(s *session, p *proc) {
	defer close(p.stopped)
	code, err := p.p.Wait(context.Background())
	if err != nil {
		code = -1
	}
	p.mu.Lock()
	changed := p.changed
	outDone := p.outDone
	p.mu.Unlock()
	deadline := time.NewTimer(procDrain)
	for !outDone {
		select {
		case <-changed:
		case <-deadline.C:
			_ = p.p.Close() // ends Read
		}
		p.mu.Lock()
		changed, outDone = p.changed, p.outDone
		p.mu.Unlock()
	}
	deadline.Stop()
	_ = p.p.Close()
	p.mu.Lock()
	reason := ProcExited
	switch {
	case p.ending != "":
		reason = p.ending
	case p.signaled && code > 128:
		reason = ProcKilled
	}
	p.exited, p.code, p.reason = true, code, reason
	total := p.total
	p.notify()
	p.mu.Unlock()
	var exit *int
	if err == nil {
		exit = &code
	}
	var wsChanges *commands.Changes
	if pc, ok := p.p.(runtime.ProcessChanges); ok {
		wsChanges = pc.Changes()
	}
	a.recordExitChanges(s, p.id, exit, reason, total, wsChanges)
}

// recordExit records a process's end as a proc_exit operation of the node.
func (a *Agent) recordExit(s *session, id int64, code *int, reason string, total int64) {
	a.recordExitChanges(s, id, code, reason, total, nil)
}

// recordExitChanges is recordExit with what the process changed.
func (a *Agent) recordExitChanges(s *session, id int64, code *int, reason string, total int64, changed *commands.Changes) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a.perform(ctx, s, commands.Request{Actor: "node:" + a.cfg.ID}, commands.OpProcExit, events.ProcRef{ProcessID: id}, func(context.Context) (outcome, error) {
		return outcome{result: struct{}{}, data: events.ProcExitFinish{ProcessID: id, ExitCode: code, Reason: reason, OutputBytes: total, Changes: changed}}, nil
	})
}

// update waits up to the yield window for output (or for the process to
// end) and returns what it has: at most maxOut bytes, redacted. Until the
// process has ended, a tail that may begin a secret, or that is an
// unfinished UTF-8 sequence, waits for the bytes that follow it.
func (a *Agent) update(ctx context.Context, s *session, p *proc, yieldMS *int64, def int64, maxOut int, early bool) (outcome, error) {
	window := def
	if yieldMS != nil {
		window = *yieldMS
	}
	if maxOut == 0 {
		maxOut = commands.MaxProcOutputBytes
	}
	deadline := time.NewTimer(time.Duration(window) * time.Millisecond)
	defer deadline.Stop()
wait:
	for {
		p.mu.Lock()
		done, has, changed := p.exited, len(p.buf) > 0, p.changed
		p.mu.Unlock()
		if done || (early && has) {
			break
		}
		select {
		case <-changed:
		case <-deadline.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	r := s.redactor()
	p.mu.Lock()
	take := p.buf
	if !p.exited {
		take = take[:len(take)-r.partial(take)]
		take = take[:len(take)-openUTF8(take)]
	}
	out := r.bytes(take)
	used := len(take)
	if len(out) > maxOut {
		// The longest prefix that fits once redacted, not ending inside
		// a secret (its rest would go out unredacted next time) or a
		// UTF-8 sequence.
		used = rawPrefix(r, take, maxOut)
		used -= r.partial(take[:used])
		used -= openUTF8(take[:used])
		out = r.bytes(take[:used])
	}
	out = bytes.Clone(out)
	p.buf = append(p.buf[:0], p.buf[used:]...)
	dropped := p.dropped
	p.dropped = 0
	p.lastUsed = time.Now()
	res := commands.ProcResult{ProcessID: p.id, DroppedBytes: dropped, PendingBytes: int64(len(p.buf)), Running: !p.exited}
	finished := p.exited && len(p.buf) == 0
	if p.exited {
		code := p.code
		res.ExitCode, res.Reason = &code, p.reason
	}
	p.mu.Unlock()
	if finished {
		s.procs.forget(p) // its exit has been told, and all its output
	}
	res.Output, res.OutputEncoding = commands.EncodeOutput(out)
	return outcome{
		result: res,
		data:   events.ProcUpdate{ProcessID: p.id, OutputBytes: int64(len(out)), DroppedBytes: dropped, Running: res.Running, ExitCode: res.ExitCode},
		stdout: out,
	}, nil
}

// openUTF8 is the length of an unfinished UTF-8 sequence at the end of b
// (0 when b ends on a whole character or on bytes that are not UTF-8).
func openUTF8(b []byte) int {
	for n := 1; n <= 3 && n <= len(b); n++ {
		c := b[len(b)-n]
		if c < 0x80 {
			return 0
		}
		if c >= 0xC0 { // a leading byte: is its sequence whole?
			if utf8.FullRune(b[len(b)-n:]) {
				return 0
			}
			return n
		}
	}
	return 0
}

// rawPrefix returns the length of the longest prefix of raw that is at
// most n bytes once redacted.
func rawPrefix(r redactor, raw []byte, n int) int {
	lo, hi := 0, len(raw)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if len(r.bytes(raw[:mid])) <= n {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// partial is the length of the longest tail of b that is the beginning of
// a secret (but not all of it): output that must wait for what follows
// before it can be redacted or returned.
func (r redactor) partial(b []byte) int {
	best := 0
	for _, s := range r.secrets {
		for n := min(len(s)-1, len(b)); n > best; n-- {
			if bytes.HasSuffix(b, s[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

func procStartData(a *Agent, s *session, args *commands.ProcStartArgs) any {
	r := s.redactor()
	return events.ProcStart{Argv: r.strings(procArgv(args)), Cwd: r.string(args.Cwd), EnvKeys: sortedKeys(args.Env), User: args.User,
		TTY: args.TTY, Rows: args.Rows, Cols: args.Cols}
}

func procArgv(args *commands.ProcStartArgs) []string {
	if args.Shell != "" {
		return []string{"/bin/sh", "-c", args.Shell}
	}
	return args.Argv
}

func runProcStart(ctx context.Context, a *Agent, s *session, args *commands.ProcStartArgs) (outcome, error) {
	if err := a.cfg.Policy.checkExec(&commands.ExecArgs{Argv: args.Argv, Shell: args.Shell, Env: args.Env, User: args.User}); err != nil {
		return outcome{}, err
	}
	if err := requireStatus(s, commands.OpProcStart, projection.StatusRunning); err != nil {
		return outcome{}, err
	}
	pr, ok := s.sandbox().(runtime.Processes)
	if !ok {
		return outcome{}, errcode.New(errcode.InvalidRequest, "the %s runtime has no processes", s.runtime)
	}
	rp, err := pr.StartProcess(ctx, runtime.ProcessSpec{
		Argv: procArgv(args), Env: args.Env, Cwd: args.Cwd, User: args.User,
		TTY: args.TTY, Rows: args.Rows, Cols: args.Cols, Changes: a.attribution(),
	})
	if err != nil {
		return outcome{}, err
	}
	id := int64(startSeq(ctx))
	shown := s.redactor().strings(procArgv(args))
	p := &proc{
		id: id, p: rp, bufMax: a.cfg.ProcBufferBytes, stopped: make(chan struct{}), changed: make(chan struct{}),
		lastUsed: time.Now(),
		info:     commands.ProcInfo{ProcessID: id, Argv: shown, TTY: args.TTY, StartedAt: time.Now().UTC().Format(time.RFC3339Nano)},
	}
	out, err := s.procs.add(p)
	if err != nil {
		_ = rp.Close()
		return outcome{}, err
	}
	go p.pump()      // ends when the output ends (Close ends it)
	go a.watch(s, p) // ends once the process has exited and its exit is recorded
	if out != nil {
		out.kill(ProcReaped)
	}
	return a.update(ctx, s, p, args.YieldMS, commands.DefaultStartYieldMS, args.MaxOutputBytes, args.ReturnOnOutput)
}

func procWriteData(_ *Agent, _ *session, args *commands.ProcArgs) any {
	return events.ProcRef{ProcessID: args.ProcessID, InputBytes: len(args.Input), CloseStdin: args.CloseStdin}
}

func procReadData(_ *Agent, _ *session, args *commands.ProcArgs) any {
	return events.ProcRef{ProcessID: args.ProcessID}
}

func runProcWrite(ctx context.Context, a *Agent, s *session, args *commands.ProcArgs) (outcome, error) {
	p, err := s.procs.get(args.ProcessID)
	if err != nil {
		return outcome{}, err
	}
	p.mu.Lock()
	ended := p.exited
	p.mu.Unlock()
	if ended && (len(args.Input) > 0 || args.CloseStdin) {
		return outcome{}, errcode.New(errcode.InvalidState, "process %d has exited; its stdin is closed", p.id)
	}
	if len(args.Input) > 0 {
		if _, err := p.p.Write(args.Input); err != nil {
			return outcome{}, errcode.Wrap(errcode.InvalidState, err, "write to process stdin")
		}
	}
	if args.CloseStdin {
		if err := p.p.CloseStdin(); err != nil {
			return outcome{}, err
		}
	}
	if args.NoOutput {
		p.mu.Lock()
		p.lastUsed = time.Now()
		res := commands.ProcResult{ProcessID: p.id, PendingBytes: int64(len(p.buf)), Running: !p.exited}
		p.mu.Unlock()
		return outcome{result: res, data: events.ProcUpdate{ProcessID: p.id, Running: res.Running}}, nil
	}
	return a.update(ctx, s, p, args.YieldMS, commands.DefaultYieldMS, args.MaxOutputBytes, args.ReturnOnOutput)
}

func runProcRead(ctx context.Context, a *Agent, s *session, args *commands.ProcArgs) (outcome, error) {
	if len(args.Input) > 0 || args.CloseStdin || args.NoOutput {
		return outcome{}, errcode.New(errcode.InvalidRequest, "proc_read takes no input and returns output; use proc_write")
	}
	p, err := s.procs.get(args.ProcessID)
	if err != nil {
		return outcome{}, err
	}
	return a.update(ctx, s, p, args.YieldMS, commands.DefaultYieldMS, args.MaxOutputBytes, args.ReturnOnOutput)
}

func procResizeData(_ *Agent, _ *session, args *commands.ProcResizeArgs) any {
	return events.ProcResizeStart{ProcessID: args.ProcessID, Rows: args.Rows, Cols: args.Cols}
}

func runProcResize(_ context.Context, _ *Agent, s *session, args *commands.ProcResizeArgs) (outcome, error) {
	p, err := s.procs.get(args.ProcessID)
	if err != nil {
		return outcome{}, err
	}
	if err := p.p.Resize(args.Rows, args.Cols); err != nil {
		return outcome{}, err
	}
	return outcome{result: struct{}{}}, nil
}

func procSignalData(_ *Agent, _ *session, args *commands.ProcSignalArgs) any {
	return events.ProcSignalStart{ProcessID: args.ProcessID, Signal: args.Signal}
}

func runProcSignal(_ context.Context, _ *Agent, s *session, args *commands.ProcSignalArgs) (outcome, error) {
	p, err := s.procs.get(args.ProcessID)
	if err != nil {
		return outcome{}, err
	}
	p.mu.Lock()
	p.signaled = true
	p.lastUsed = time.Now()
	p.mu.Unlock()
	if err := p.p.Signal(syscall.Signal(commands.Signals[args.Signal])); err != nil {
		return outcome{}, err
	}
	return outcome{result: struct{}{}}, nil
}

func runProcList(_ context.Context, _ *Agent, s *session, _ *none) (outcome, error) {
	res := commands.ProcListResult{Processes: []commands.ProcInfo{}}
	for _, p := range s.procs.list() {
		p.mu.Lock()
		info := p.info
		info.Running = !p.exited
		info.PendingBytes = int64(len(p.buf))
		if p.exited {
			code := p.code
			info.ExitCode, info.Reason = &code, p.reason
		}
		p.mu.Unlock()
		res.Processes = append(res.Processes, info)
	}
	return outcome{result: res}, nil
}

// reapIdle ends the processes of every session that nobody has used for
// Config.ProcIdleTimeout.
func (a *Agent) reapIdle() {
	if a.cfg.ProcIdleTimeout <= 0 {
		return
	}
	before := time.Now().Add(-a.cfg.ProcIdleTimeout)
	for _, s := range a.held() {
		for _, p := range s.procs.idle(before) {
			p.mu.Lock()
			ex := p.exited
			p.mu.Unlock()
			if ex {
				s.procs.forget(p)
				continue
			}
			p.kill(ProcReaped)
		}
	}
}
