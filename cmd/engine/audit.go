package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/paddock-dev/paddock/auth"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/audit"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/readiness"
	"github.com/paddock-dev/paddock/replay"
)

// auditCmd is `engine audit verify`: check every session's history (or
// one's) from the stored events, and list the problems the projector
// recorded. Any failure makes the exit code 1.
func auditCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "verify" {
		return usageErr("usage: engine audit verify [--session ID] [--json]")
	}
	var g globals
	fs := newFlagSet("audit verify", stderr)
	g.register(fs, base)
	session := fs.String("session", "", "only this session (of --tenant); default: every session of every tenant")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	allowUnsigned := fs.Bool("allow-unsigned", false, "accept unsigned events (histories written before nodes signed)")
	nodeKeys := fs.String("node-keys", "", "JSON file {node: public key} of the keys issued to nodes (default: those of the auth store in --auth-dir)")
	authDir := fs.String("auth-dir", auth.DirIn(auth.DefaultStateDir()), "auth store whose node keys to trust (engine serve's state dir/auth)")
	wait := waitFlag(fs, "")
	pos, rest, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("audit verify takes no arguments")
	}
	js, closeConn, err := dialJS(&g)
	if err != nil {
		return err
	}
	defer closeConn()
	log := events.NewLog(js, "", "")
	// The whole stream: the checker skips node events, and an unfiltered
	// consumer is much cheaper for the server than a wildcard filter.
	filter := ">"
	if *session != "" {
		for _, f := range [][2]string{{"tenant", g.tenant}, {"session", *session}} {
			if err := commands.CheckToken(f[0], f[1]); err != nil {
				return err
			}
		}
		filter = log.Subjects().SessionFilter(g.tenant, *session)
	}
	if *session == "" && g.consumer() != "" {
		// An auditor may read its tenant's events (or every tenant's) and
		// the node events, not the whole stream.
		filter = log.Subjects().Filter(g.who.Tenant, "", "")
	}
	issued, engines, keysFrom, err := auth.TrustedNodeKeys(*nodeKeys, *authDir)
	if err != nil {
		return err
	}
	var rep audit.Report
	err = readiness.Retry(ctx, js, "events stream", events.DefaultStream, *wait, func(ctx context.Context) error {
		log, err := log.Resolve(ctx)
		if err != nil {
			return err
		}
		// The first sequence says whether retention dropped events: of a
		// partitioned log, the highest of any partition's.
		var first uint64
		for k := range log.Partitions() {
			info, err := log.Partition(k).StreamInfo(ctx)
			if err != nil {
				return err
			}
			first = max(first, info.State.FirstSeq)
		}
		checker := audit.NewChecker(log.Subjects(), first)
		checker.SetTrust(audit.Trust{Issued: issued, Engines: engines, RequireSigned: !*allowUnsigned})
		checker.SetPartial(*session != "")
		check := func(m events.Msg) error {
			checker.Check(m)
			return nil
		}
		if filter != ">" {
			// The nodes' registered events first: they say which key each
			// node signs with.
			if err := log.Read(ctx, events.ReadOptions{Filters: []string{log.Subjects().AllNodes()}, Consumer: g.consumer(), Provision: g.provisioner(js)}, check); err != nil {
				return err
			}
		}
		if err := log.Read(ctx, events.ReadOptions{Filters: []string{filter}, Consumer: g.consumer(), Provision: g.provisioner(js)}, check); err != nil {
			return err
		}
		rep = checker.Report()
		return nil
	})
	if err != nil {
		return err
	}
	if *session != "" && rep.Events == 0 {
		return errcode.New(errcode.SessionNotFound, "no events of session %s in tenant %s", *session, g.tenant)
	}
	var recorded []replay.Problem
	note := "the projection is not an auditor's to read: the events alone were checked"
	if g.consumer() == "" {
		err := readiness.Retry(ctx, js, "sessions projection", "KV_"+projector.SessionsBucket, *wait, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, projectionTry)
			defer cancel()
			var err error
			recorded, note, err = projectorProblems(ctx, js, g.tenant, *session)
			return err
		})
		if err != nil {
			recorded, note = nil, fmt.Sprintf("the projection cannot be read: %v", err)
		}
	}

	failures := len(recorded)
	open := 0
	for _, f := range rep.Findings {
		switch {
		case f.Kind.Failure():
			failures++
		case f.Kind == audit.Open:
			open++
		}
	}
	if *jsonOut {
		if err := printJSON(stdout, struct {
			audit.Report
			Recorded []replay.Problem `json:"projector_problems,omitempty"`
			Failures int              `json:"failures"`
		}{rep, recorded, failures}); err != nil {
			return err
		}
	} else {
		for _, f := range rep.Findings {
			label := "FAIL"
			switch f.Kind {
			case audit.Open:
				label = "open"
			case audit.Truncated:
				label = "note"
			}
			fmt.Fprintf(stdout, "%s %s\n", label, f)
		}
		for _, p := range recorded {
			fmt.Fprintf(stdout, "FAIL %s: recorded by the projector: %s\n", p.Record, p.Problem)
		}
		if note != "" {
			fmt.Fprintf(stdout, "note: %s\n", note)
		}
		for _, sg := range rep.Signers {
			fmt.Fprintf(stdout, "signed: node %s, key %s (%s): %d events\n", sg.Node, sg.Key, sg.Trust, sg.Events)
		}
		fmt.Fprintf(stdout, "node keys: %s\n", keysFrom)
		fmt.Fprintf(stdout, "audit: %d sessions, %d events checked (signatures, hash chain, seq, one finish per start): %d failures, %d open operations\n", rep.Sessions, rep.Events, failures, open)
	}
	if failures > 0 {
		return exitError{1}
	}
	return nil
}

// projectorProblems returns the problems the projector recorded in its
// records (one session's, or all), or a note saying why there are none to
// show, or the error that kept it from reading them.
func projectorProblems(ctx context.Context, js jetstream.JetStream, tenant, session string) ([]replay.Problem, string, error) {
	ss, err := projector.OpenSessions(ctx, js)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, "no projection to check (no projector has run)", nil
	}
	if err != nil {
		return nil, "", err
	}
	filter := ">"
	if session != "" {
		filter = projection.SessionKey(tenant, session)
	}
	set := projection.NewSet()
	recs, err := ss.List(ctx, filter)
	if err != nil {
		return nil, "", err
	}
	set.Sessions = recs
	if session == "" {
		if nkv, err := js.KeyValue(ctx, projector.NodesBucket); err == nil {
			if nodes, err := projector.ReadAll[projection.NodeRecord](ctx, nkv, ">"); err == nil {
				set.Nodes = nodes
			}
		}
		if skv, err := js.KeyValue(ctx, projector.StateBucket); err == nil {
			if e, err := skv.Get(ctx, projector.StrayKey); err == nil {
				_ = json.Unmarshal(e.Value(), &set.Stray)
			}
		}
	}
	return replay.Problems(set), "", nil
}
