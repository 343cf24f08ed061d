package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

// EventSource reads a tenant's events.
type EventSource interface {
	// Read delivers the events opts select, in order, to fn, as
	// events.Log.Read does.
	Read(ctx context.Context, opts events.ReadOptions, fn func(events.Msg) error) error
	// Subjects names the events' subjects.
	Subjects() events.Subjects
}

var (
	_ EventSource = (*events.Log)(nil)
	_ EventSource = (*AuditorEvents)(nil)
)

// AuditorEvents is an EventSource that reads through the one consumer an
// auditor's credentials allow, which the engine provisions
// (auditfeed.Provisioner). One read at a time: each read makes that
// consumer and deletes it when done, so two at once would take it from
// each other.
type AuditorEvents struct {
	Log       *events.Log
	Consumer  string
	Provision events.Provisioner

	mu sync.Mutex // held for a whole Read
}

// Read implements EventSource.
func (a *AuditorEvents) Read(ctx context.Context, opts events.ReadOptions, fn func(events.Msg) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	opts.Consumer, opts.Provision = a.Consumer, a.Provision
	return a.Log.Read(ctx, opts, fn)
}

// Subjects implements EventSource.
func (a *AuditorEvents) Subjects() events.Subjects { return a.Log.Subjects() }

// EventsInput is sandbox_events' arguments.
type EventsInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	AfterSeq  uint64 `json:"after_seq,omitempty" jsonschema:"only events after this session seq: the next_after_seq of the previous page"`
	Limit     int    `json:"limit,omitempty" jsonschema:"most events in this page (default 100, at most 1000)"`
}

// EventsOutput is sandbox_events' result: the session's events in order,
// as stored (start and finish of every operation, with its actor).
type EventsOutput struct {
	Events []events.Event `json:"events"`
	// NextAfterSeq is the after_seq of the next page; More says one exists.
	NextAfterSeq uint64 `json:"next_after_seq"`
	More         bool   `json:"more"`
}

// errPageFull stops a read once a page has one event more than it holds.
var errPageFull = errors.New("page full")

func (t tools) events(ctx context.Context, in EventsInput) (EventsOutput, string, error) {
	out := EventsOutput{Events: []events.Event{}, NextAfterSeq: in.AfterSeq}
	if err := commands.CheckToken("session_id", in.SessionID); err != nil {
		return out, "", err
	}
	if in.Limit < 0 || in.Limit > MaxEvents {
		return out, "", errcode.New(errcode.InvalidRequest, "limit %d is outside 0..%d", in.Limit, MaxEvents)
	}
	if in.Limit == 0 {
		in.Limit = DefaultEvents
	}
	if t.id.Events == nil {
		return out, "", errcode.New(errcode.PermissionDenied, "%s may not read events (a client drives sandboxes; an auditor of its tenant reads events): start engine mcp with --events-creds of an auditor", t.id.Name)
	}
	tenant := t.id.Client.Tenant()
	filter := t.id.Events.Subjects().SessionFilter(tenant, in.SessionID)
	err := t.id.Events.Read(ctx, events.ReadOptions{Filters: []string{filter}}, func(m events.Msg) error {
		ev, err := m.Decode()
		if err != nil {
			return err
		}
		if ev.Seq <= in.AfterSeq {
			return nil
		}
		if len(out.Events) == in.Limit {
			out.More = true
			return errPageFull
		}
		out.Events = append(out.Events, ev)
		out.NextAfterSeq = ev.Seq
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return out, "", err
	}
	if len(out.Events) == 0 && in.AfterSeq == 0 {
		return out, "", errcode.New(errcode.SessionNotFound, "no events of session %s in tenant %s", in.SessionID, tenant)
	}
	var b strings.Builder
	for _, ev := range out.Events {
		fmt.Fprintf(&b, "%d %s %s %s", ev.Seq, ev.TS.Format("15:04:05.000"), ev.Op, ev.Phase)
		if ev.OK != nil {
			fmt.Fprintf(&b, " ok=%t", *ev.OK)
		}
		if ev.ErrorCode != "" {
			b.WriteString(" " + ev.ErrorCode)
		}
		fmt.Fprintf(&b, " actor=%s\n", ev.Actor)
	}
	if out.More {
		fmt.Fprintf(&b, "(more after seq %d)\n", out.NextAfterSeq)
	}
	return out, b.String(), nil
}
