package scheduler

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/tracing"
)

// DefaultMaxForks is Config.MaxForks's default.
const DefaultMaxForks = commands.MaxForks

// forkParallel bounds the children of one fork placed at once.
const forkParallel = 8

// handleFork serves a tenant's fork:
//
//	draw N child ids      deterministic from the command id (a retried
//	                      fork names the same children), else uuids
//	fork on the parent    the parent's node records the point in the
//	                      parent's chain (persisting first unless the
//	                      request names a recorded snapshot)
//	place every child     as a create of the parent's spec, with the
//	                      point as its Parent, at most forkParallel at once
//
// The fork answers the children that came up and the ones that did not;
// when none came up it fails with the first child's error.
func (s *Scheduler) handleFork(ctx context.Context, m *nats.Msg) {
	var r commands.ForkRequest
	tenant, req, ok := s.decodeTenant(m, &r)
	if !ok {
		return
	}
	ctx, span := s.startSpan(ctx, "fork", tenant, r.SessionID, req)
	res, err := s.Fork(ctx, tenant, req, r)
	s.respondResult(m, span, res, err)
}

// Fork forks tenant's session r.SessionID as handleFork describes; req is
// the request as the tenant sent it (its command id and actor).
func (s *Scheduler) Fork(ctx context.Context, tenant string, req commands.Request, r commands.ForkRequest) (commands.ForkResult, error) {
	if r.N > s.cfg.MaxForks {
		return commands.ForkResult{}, errcode.New(errcode.PolicyDenied, "n %d is more than this deployment's maximum of %d children per fork", r.N, s.cfg.MaxForks)
	}
	st, err := s.session(ctx, tenant, r.SessionID)
	if err != nil {
		return commands.ForkResult{}, err
	}
	if st.Status != projection.StatusRunning && st.Status != projection.StatusStopped {
		return commands.ForkResult{}, errcode.New(errcode.InvalidState, "session %s is %s: only a running or stopped session forks; resume it first", r.SessionID, st.Status)
	}
	spec, err := s.parentSpec(ctx, tenant, r.SessionID)
	if err != nil {
		return commands.ForkResult{}, err
	}
	spec.SecretEnv = r.SecretEnv
	if err := spec.Validate(); err != nil {
		return commands.ForkResult{}, err
	}
	children := make([]string, r.N)
	for i := range children {
		if req.CommandID != "" {
			children[i] = commands.SessionIDFor(tenant, req.CommandID+"\x00fork\x00"+strconv.Itoa(i))
		} else {
			children[i] = uuid.NewString()
		}
	}
	point, err := s.forkParent(ctx, tenant, req, r, children)
	if err != nil {
		return commands.ForkResult{}, err
	}
	res := commands.ForkResult{Parent: point, Children: []string{}}
	replies := s.placeChildren(ctx, tenant, req, spec, point, children)
	var first error
	for i, rep := range replies {
		if rep == nil {
			res.Children = append(res.Children, children[i])
			continue
		}
		res.Failed = append(res.Failed, commands.ForkFailure{SessionID: children[i], Error: rep})
		if first == nil {
			first = rep.Err()
		}
	}
	if len(res.Children) == 0 {
		return commands.ForkResult{}, first // no child came up
	}
	return res, nil
}

// forkParent sends the session op fork to the parent's node and returns
// the point it recorded. A parent no node serves is invalid_state.
func (s *Scheduler) forkParent(ctx context.Context, tenant string, req commands.Request, r commands.ForkRequest, children []string) (commands.Parent, error) {
	fctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
	defer cancel()
	body := forward(req, commands.ForkArgs{Children: children, SnapshotID: r.SnapshotID, AtSeq: r.AtSeq})
	msg, err := client.Requester{Conn: s.nc}.Send(fctx, s.subj.Session(tenant, r.SessionID, commands.OpFork), tracing.Inject(fctx, nil), body)
	if errors.Is(err, nats.ErrNoResponders) {
		return commands.Parent{}, errcode.New(errcode.InvalidState, "no node serves session %s: resume it first", r.SessionID)
	}
	if err != nil {
		return commands.Parent{}, errcode.Wrap(errcode.Unavailable, err, "fork on the parent's node")
	}
	rep, err := client.DecodeReply(msg.Data)
	if err != nil {
		return commands.Parent{}, err
	}
	var pt commands.ForkPoint
	if err := client.ReplyResult(rep, &pt); err != nil {
		return commands.Parent{}, err
	}
	if pt.Parent.SessionID != r.SessionID || pt.Parent.Snapshot == "" {
		return commands.Parent{}, errcode.New(errcode.Internal, "the parent's node answered the fork with point %+v", pt.Parent)
	}
	return pt.Parent, nil
}

// placeChildren places every child as a create of spec with point as its
// parent, at most forkParallel at once, and returns for each its error
// (nil: it came up).
func (s *Scheduler) placeChildren(ctx context.Context, tenant string, req commands.Request, spec commands.CreateArgs, point commands.Parent, children []string) []*commands.WireError {
	image := spec.Image
	if image == "" && spec.Runtime != "local" {
		image = commands.DefaultImage
	}
	w := want{spec.Runtime, spec.NodeLabels, image}
	out := make([]*commands.WireError, len(children))
	sem := make(chan struct{}, forkParallel)
	var wg sync.WaitGroup
	for i, id := range children {
		wg.Add(1)
		sem <- struct{}{}
		go func() { // owned by this call: it waits for every child
			defer func() { <-sem; wg.Done() }()
			out[i] = s.placeChild(ctx, tenant, req, w, spec, point, id)
		}()
	}
	wg.Wait()
	return out
}

func (s *Scheduler) placeChild(ctx context.Context, tenant string, req commands.Request, w want, spec commands.CreateArgs, point commands.Parent, id string) *commands.WireError {
	release, err := s.reserve(tenant)
	if err != nil {
		return wireError(err)
	}
	defer release()
	creq := req
	creq.CommandID = id // a retried fork's child gets its first create's outcome
	p := point
	reply := s.place(ctx, w, "create", tenant, forward(creq, commands.Placement{Tenant: tenant, SessionID: id, Spec: spec, Parent: &p}))
	rep, err := client.DecodeReply(reply)
	if err != nil {
		return wireError(err)
	}
	return rep.Error
}

func wireError(err error) *commands.WireError {
	var e *errcode.Error
	if !errors.As(err, &e) {
		e = errcode.Wrap(errcode.Internal, err, "place the child")
	}
	return &commands.WireError{Code: e.Code, Message: e.Message, Retryable: e.Code.Retryable()}
}

// parentSpec rebuilds the create spec of a session from its history: its
// create start (image, runtime, environment, labels, limits, network,
// user, ports, egress), the egress policy of the last resume that changed
// it, and what is left of its lifetime. Secret values are never recorded,
// so the spec has none.
func (s *Scheduler) parentSpec(ctx context.Context, tenant, id string) (commands.CreateArgs, error) {
	evs, err := s.log.Session(ctx, tenant, id)
	if err != nil {
		return commands.CreateArgs{}, err
	}
	if len(evs) == 0 || evs[0].Op != string(commands.OpCreate) || evs[0].Phase != events.PhaseStart {
		return commands.CreateArgs{}, errcode.New(errcode.SessionNotFound, "session %s has no create", id)
	}
	cs, err := events.DecodeData[events.CreateStart](evs[0])
	if err != nil {
		return commands.CreateArgs{}, errcode.Wrap(errcode.Internal, err, "the parent's create start")
	}
	spec := commands.CreateArgs{
		Runtime: cs.Runtime, Image: cs.Image, Env: cs.Env, Labels: cs.Labels, NodeLabels: cs.NodeLabels,
		CPUs: cs.CPUs, MemoryBytes: cs.MemoryBytes, DiskBytes: cs.DiskBytes, WorkspaceRoot: cs.WorkspaceRoot,
		Network: cs.Network, User: cs.User, PidsLimit: cs.PidsLimit, MaxProcesses: cs.MaxProcesses,
		ExposedPorts: cs.ExposedPorts, Egress: cs.Egress, IdleTimeoutS: cs.IdleTimeoutS,
	}
	pending := map[string]*commands.Egress{} // resume span → the egress it asks
	for _, ev := range evs[1:] {
		if ev.Op != string(commands.OpResume) {
			continue
		}
		switch {
		case ev.Phase == events.PhaseStart:
			if d, err := events.DecodeData[events.ResumeStart](ev); err == nil && d.Egress != nil {
				pending[ev.SpanID] = d.Egress
			}
		case ev.OK != nil && *ev.OK && pending[ev.SpanID] != nil:
			spec.Egress = pending[ev.SpanID]
			if spec.Egress.Mode != "open" {
				spec.Network = false
			}
		}
	}
	if cs.ExpiresAt != nil {
		left := time.Until(*cs.ExpiresAt)
		if left <= 0 {
			return commands.CreateArgs{}, errcode.New(errcode.InvalidState, "session %s is past its lifetime", id)
		}
		spec.LifetimeS = int64((left + time.Second - 1) / time.Second)
	}
	return spec, nil
}
