package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

func eventsCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "tail" {
		return usageErr("usage: engine events tail [--session ID] [--op OP] [--no-follow] [--json]")
	}
	var g globals
	fs := newFlagSet("events tail", stderr)
	g.register(fs, base)
	session := fs.String("session", "", "only this session's events")
	op := fs.String("op", "", "only this op's events")
	noFollow := fs.Bool("no-follow", false, "print the events so far and exit")
	jsonOut := fs.Bool("json", false, "print events as JSON lines")
	pos, rest, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("events tail takes no arguments")
	}
	if err := commands.CheckToken("tenant", g.tenant); err != nil {
		return err
	}
	for _, f := range []struct{ what, v string }{{"session", *session}, {"op", *op}} {
		if f.v != "" {
			if err := commands.CheckToken(f.what, f.v); err != nil {
				return err
			}
		}
	}
	nc, _, err := dial(g)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "jetstream")
	}
	log := events.NewLog(js, "", "")
	filter := log.Subjects().Filter(g.tenant, *session, *op)
	err = log.Read(ctx, events.ReadOptions{Filters: []string{filter}, Follow: !*noFollow}, func(m events.Msg) error {
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
	})
	if errors.Is(err, context.Canceled) {
		return nil // interrupted while following: a normal end
	}
	return err
}

// formatEvent renders one event as a line for people.
func formatEvent(ev events.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-36s %4d  %-8s %-6s", ev.TS.Local().Format("15:04:05.000"), ev.SessionID, ev.Seq, ev.Op, ev.Phase)
	if ev.Phase == events.PhaseFinish {
		if ev.OK != nil && *ev.OK {
			b.WriteString(" ok")
		} else {
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
	} else if len(ev.Data) > 0 && string(ev.Data) != "null" {
		fmt.Fprintf(&b, " %s", ev.Data)
	}
	return b.String()
}
