package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/paddock-dev/paddock/auth"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/readiness"
)

func eventsCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "repartition" {
		var g globals
		fs := newFlagSet("events repartition", stderr)
		g.register(fs, base)
		n := fs.Int("partitions", 0, fmt.Sprintf("the number of partitions to move the one-stream deployment to (2..%d)", events.MaxPartitions))
		wait := fs.Duration("wait", time.Second, "how long to listen for nodes' heartbeats (a node that answers refuses the repartition)")
		jsonOut := fs.Bool("json", false, "print {\"partitions\", \"sessions\", \"session_events\", \"node_events\", \"backup\"} once done, instead of each step")
		pos, rest, err := parseInterleaved(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) > 0 || rest != nil {
			return usageErr("events repartition takes no arguments")
		}
		return repartitionCmd(ctx, g, *n, *wait, *jsonOut, stdout)
	}
	if len(args) == 0 || (args[0] != "tail" && args[0] != "export") {
		return usageErr("usage: engine events tail [--session ID] [--op OP] [--since SEQ|TIME|DURATION] [--durable NAME] [--all-tenants] [--no-follow] [--json]\n       engine events export [--session ID] [--format stored|sdk] > events.jsonl\n       engine events repartition --partitions N   (engines and nodes stopped; see docs/scale.md)")
	}
	sub := args[0]
	var g globals
	fs := newFlagSet("events "+sub, stderr)
	g.register(fs, base)
	session := fs.String("session", "", "only this session's events")
	wait := waitFlag(fs, "")
	var (
		op         = new(string)
		since      = new(string)
		durable    = new(string)
		noFollow   = new(bool)
		jsonOut    = new(bool)
		allTenants = new(bool)
		format     = new(string)
	)
	if sub == "export" {
		fs.Bool("json", true, "the events are JSON lines always (accepted for every command's --json)")
		format = fs.String("format", "stored", "stored: the events as stored; sdk: in the OpenAI Agents SDK's audit event format (proc_start is exec; ls, rm, mkdir and the other proc ops have none and are skipped)")
	}
	if sub == "tail" {
		op = fs.String("op", "", "only this op's events")
		since = fs.String("since", "", "start at a stream sequence, a time (RFC 3339) or a duration ago (10m)")
		durable = fs.String("durable", "", "read through this named durable consumer: resume where it left off, acknowledge what was printed")
		noFollow = fs.Bool("no-follow", false, "print the events so far and exit")
		jsonOut = fs.Bool("json", false, "print events as JSON lines, as stored")
		allTenants = fs.Bool("all-tenants", false, "every tenant's events (an auditor's view); --tenant is ignored")
	}
	pos, rest, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("events %s takes no arguments", sub)
	}
	if *format != "" && *format != "stored" && *format != "sdk" {
		return usageErr("--format %q: want stored or sdk", *format)
	}
	if err := commands.CheckToken("tenant", g.tenant); err != nil {
		return err
	}
	for _, f := range []struct{ what, v string }{{"session", *session}, {"op", *op}, {"durable", *durable}} {
		if f.v != "" {
			if err := commands.CheckToken(f.what, f.v); err != nil {
				return err
			}
		}
	}
	var startSeq uint64
	var startTime time.Time
	if *since != "" {
		if startSeq, startTime, err = parseSince(*since, time.Now()); err != nil {
			return err
		}
	}
	js, closeConn, err := dialJS(&g)
	if err != nil {
		return err
	}
	defer closeConn()
	if g.who != nil && g.who.Role == auth.RoleAuditor && g.who.Tenant != "" && *allTenants {
		return errcode.New(errcode.PermissionDenied, "%s audits tenant %s only", g.who.Name, g.who.Tenant)
	}
	log := events.NewLog(js, "", "")
	tenant := g.tenant
	if *allTenants {
		tenant = ""
	}
	filter := log.Subjects().Filter(tenant, *session, *op)
	// A read that fails on a passing fault is tried again from the event
	// after the last one printed, in each partition's stream (a durable
	// consumer resumes by itself).
	var res resumption
	if sub == "export" && *format == "sdk" {
		return exportSDK(ctx, js, *wait, log, filter, g.consumer(), g.provisioner(js), stdout, stderr)
	}
	if sub == "export" {
		// The stored bytes, one event per line: the stream's own JSON.
		return readiness.Retry(ctx, js, "events stream", events.DefaultStream, *wait, func(ctx context.Context) error {
			return log.Read(ctx, events.ReadOptions{Filters: []string{filter}, StartSeq: startSeq, After: res.after, Consumer: g.consumer(), Provision: g.provisioner(js)}, func(m events.Msg) error {
				_, err := fmt.Fprintf(stdout, "%s\n", m.Data)
				res.reached(m)
				return err
			})
		}, res.progress)
	}
	print := func(m events.Msg) error {
		res.reached(m)
		if *jsonOut {
			_, err := fmt.Fprintf(stdout, "%s\n", m.Data)
			return err
		}
		ev, err := m.Decode()
		if err != nil {
			fmt.Fprintf(stderr, "paddock: skipping undecodable event at stream seq %d: %v\n", m.StreamSeq, err)
			return nil
		}
		_, err = fmt.Fprintln(stdout, formatEvent(ev))
		return err
	}
	if c := g.consumer(); c != "" && *durable != "" && *durable != c {
		return errcode.New(errcode.PermissionDenied, "an auditor's durable consumer is named %s (its credentials allow no other)", c)
	}
	err = readiness.Retry(ctx, js, "events stream", events.DefaultStream, *wait, func(ctx context.Context) error {
		if *durable != "" {
			seq, t := startSeq, startTime
			if res.n > 0 {
				seq, t = 0, time.Time{} // the consumer exists: it resumes
			}
			return log.ReadDurable(ctx, events.DurableOptions{
				Name: *durable, Filters: []string{filter}, StartSeq: seq, StartTime: t, Follow: !*noFollow,
				Provision: g.provisioner(js),
			}, print)
		}
		return log.Read(ctx, events.ReadOptions{Filters: []string{filter}, StartSeq: startSeq, StartTime: startTime, After: res.after,
			Follow: !*noFollow, Consumer: g.consumer(), Provision: g.provisioner(js)}, print)
	}, res.progress)
	if errors.Is(err, context.Canceled) {
		return nil // interrupted while following: a normal end
	}
	return err
}

// exportSDK writes the events that filter matches as JSON lines in the
// OpenAI Agents SDK's format (events.ToSDK) and says on stderr how many it
// skipped and why: ops the SDK has no name for, and events it cannot
// decode (another schema version).
func exportSDK(ctx context.Context, js jetstream.JetStream, wait time.Duration, log *events.Log, filter, consumer string, provision events.Provisioner, stdout, stderr io.Writer) error {
	noOp := map[string]int{}
	undecodable := 0
	var conv events.SDKExporter
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	var res resumption // a retry starts after the last event handled
	err := readiness.Retry(ctx, js, "events stream", events.DefaultStream, wait, func(ctx context.Context) error {
		opts := events.ReadOptions{Filters: []string{filter}, Consumer: consumer, Provision: provision, After: res.after}
		return log.Read(ctx, opts, func(m events.Msg) error {
			res.reached(m)
			return exportSDKOne(m, &conv, enc, noOp, &undecodable, stderr)
		})
	}, res.progress)
	if err != nil {
		return err
	}
	if len(noOp) > 0 {
		ops := make([]string, 0, len(noOp))
		n := 0
		for op, c := range noOp {
			ops = append(ops, fmt.Sprintf("%s %d", op, c))
			n += c
		}
		sort.Strings(ops)
		fmt.Fprintf(stderr, "paddock: skipped %d events of ops the OpenAI Agents SDK does not audit (%s)\n", n, strings.Join(ops, ", "))
	}
	if undecodable > 0 {
		fmt.Fprintf(stderr, "paddock: skipped %d events this engine cannot decode\n", undecodable)
	}
	return nil
}

// exportSDKOne writes one event in the SDK's format, or counts why not.
func exportSDKOne(m events.Msg, conv *events.SDKExporter, enc *json.Encoder, noOp map[string]int, undecodable *int, stderr io.Writer) error {
	ev, err := m.Decode()
	if err != nil {
		*undecodable++
		fmt.Fprintf(stderr, "paddock: skipping undecodable event at stream seq %d: %v\n", m.StreamSeq, err)
		return nil
	}
	out, ok := conv.Convert(ev)
	if !ok {
		noOp[ev.Op]++
		return nil
	}
	return enc.Encode(out)
}

// parseSince reads --since: a stream sequence (digits), a time (RFC 3339)
// or a duration before now.
func parseSince(s string, now time.Time) (uint64, time.Time, error) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil && n > 0 {
		return n, time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return 0, t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return 0, now.Add(-d), nil
	}
	return 0, time.Time{}, usageErr("--since %q is neither a stream sequence, an RFC 3339 time nor a duration like 10m", s)
}

// formatEvent renders one event as a line for people.
func formatEvent(ev events.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-36s %4d  %-8s %-6s", formatTime(ev.TS), ev.SessionID, ev.Seq, ev.Op, ev.Phase)
	if ev.Phase == events.PhaseFinish {
		switch {
		case ev.OK != nil && *ev.OK:
			b.WriteString(" ok")
		case ev.ErrorCode == "" && ev.ExitCode != nil:
			b.WriteString(" nonzero") // the command ran and exited non-zero
		default:
			fmt.Fprintf(&b, " FAILED %s", ev.ErrorCode)
		}
		if ev.DurationMS != nil {
			fmt.Fprintf(&b, " %.1fms", *ev.DurationMS)
		}
		if ev.ExitCode != nil {
			fmt.Fprintf(&b, " exit=%d", *ev.ExitCode)
		}
		if ev.ErrorMessage != "" {
			fmt.Fprintf(&b, " (%s)", ev.ErrorMessage)
		}
		if c := formatChanges(ev.Data); c != "" {
			fmt.Fprintf(&b, " %s", c)
		}
	} else if len(ev.Data) > 0 && string(ev.Data) != "null" {
		fmt.Fprintf(&b, " %s", ev.Data)
	}
	return b.String()
}

// resumption is where a read that prints as it goes has got to: the last
// event handled in each stream (partition), for a retry to go on after
// it (events.ReadOptions.After), and how many it handled.
type resumption struct {
	after map[string]uint64
	n     uint64
}

// reached records m as handled.
func (r *resumption) reached(m events.Msg) {
	if r.after == nil {
		r.after = map[string]uint64{}
	}
	r.after[m.Stream] = m.StreamSeq
	r.n++
}

// progress is how many events were handled: readiness.Retry's progress.
func (r *resumption) progress() uint64 { return r.n }
