package main

import (
	"context"
	"errors"
	"fmt"
	flag "github.com/spf13/pflag"
	"io"
	"log/slog"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/retention"
)

// retentionFlags are the retention policy's flags, shared by `engine gc`
// and `engine serve` (which sweeps every --gc-interval).
type retentionFlags struct {
	transferTTL, deleted, orphanGrace time.Duration
	keep                              int
}

func registerRetention(fs *flag.FlagSet) *retentionFlags {
	f := &retentionFlags{}
	fs.DurationVar(&f.transferTTL, "transfer-ttl", retention.DefaultTransferTTL, "remove temporary transfer objects (uploads) older than this")
	fs.DurationVar(&f.orphanGrace, "orphan-grace", retention.DefaultOrphanGrace, "remove the chunks of an unfinished put (its writer killed) this long after their last write (1m or more)")
	fs.DurationVar(&f.deleted, "deleted-retention", retention.DefaultDeletedRetention, "remove the snapshots of sessions deleted this long ago (0: at once)")
	fs.IntVar(&f.keep, "snapshot-keep", 0, "keep a session's newest N snapshots, and always the one it resumes from (0: keep every one)")
	return f
}

func (f *retentionFlags) policy() (retention.Policy, error) {
	p := retention.Policy{TransferTTL: f.transferTTL, OrphanGrace: f.orphanGrace, DeletedRetention: f.deleted, KeepLast: f.keep}
	if err := p.Validate(); err != nil || f.orphanGrace < retention.MinOrphanGrace {
		return p, usageErr("--transfer-ttl above 0, --orphan-grace of %s or more, and no negative --deleted-retention or --snapshot-keep", retention.MinOrphanGrace)
	}
	return p, nil
}

// sessionRecords reads every tenant's session records from the projection.
func sessionRecords(js jetstream.JetStream) retention.Sessions {
	return func(ctx context.Context) ([]projection.SessionRecord, error) {
		kv, err := js.KeyValue(ctx, projector.SessionsBucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, errcode.New(errcode.Unavailable, "no sessions projection (bucket %s): is an engine with its projector running?", projector.SessionsBucket)
		}
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "sessions projection")
		}
		recs, err := projector.ReadAll[projection.SessionRecord](ctx, kv, ">")
		if err != nil {
			return nil, errcode.Wrap(errcode.Unavailable, err, "read the sessions projection")
		}
		out := make([]projection.SessionRecord, 0, len(recs))
		for _, r := range recs {
			out = append(out, r)
		}
		return out, nil
	}
}

// gcCmd is `engine gc [--dry-run] [--json]`: one retention sweep of the
// workspace bucket, every tenant's, with the engine's or an admin's
// credentials. It prints what it removed, or with --dry-run would.
func gcCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	var g globals
	fs := newFlagSet("gc", stderr)
	g.register(fs, base)
	dry := fs.Bool("dry-run", false, "remove nothing: print what a sweep would remove")
	jsonOut := fs.Bool("json", false, "print JSON")
	rf := registerRetention(fs)
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || rest != nil {
		return usageErr("gc takes no arguments")
	}
	p, err := rf.policy()
	if err != nil {
		return err
	}
	js, store, closeConn, err := openWorkspaces(ctx, &g, "gc")
	if err != nil {
		return err
	}
	defer closeConn()
	removed, err := retention.Sweep(ctx, store, sessionRecords(js), p, *dry, nil)
	if *jsonOut {
		if removed == nil {
			removed = []retention.Removal{}
		}
		if perr := printJSON(stdout, removed); perr != nil {
			return perr
		}
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REASON\tNAME\tSIZE\tCREATED")
	for _, r := range removed {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Reason, r.Name, r.Size, timeOrDash(r.Created))
	}
	total := removedBytes(removed)
	verb := "removed"
	if *dry {
		verb = "would remove"
	}
	fmt.Fprintf(tw, "(%s %d, %d bytes)\n", verb, len(removed), total)
	if ferr := tw.Flush(); ferr != nil {
		return ferr
	}
	return err
}

// sweeper runs a retention sweep every interval until closed, and a sweep
// of orphan chunks every orphan grace period, so that a killed put's
// chunks go within two grace periods whatever the interval; it is the
// engine's (engine serve --gc-interval). Several engines may sweep at once.
type sweeper struct {
	store    *objectstore.Store
	sessions retention.Sessions
	policy   retention.Policy
	every    time.Duration
	logger   *slog.Logger
	cancel   context.CancelFunc // ends the loop, and cuts a sweep short
	wg       sync.WaitGroup
}

func (s *sweeper) start() {
	root, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(s.every)
		defer t.Stop()
		grace := s.policy.OrphanGrace
		if grace <= 0 {
			grace = retention.DefaultOrphanGrace
		}
		o := time.NewTicker(grace)
		defer o.Stop()
		for {
			orphans := false
			select {
			case <-root.Done():
				return
			case <-t.C:
			case <-o.C:
				orphans = true
			}
			ctx, cancel := context.WithTimeout(root, min(s.every, grace))
			what := "retention sweep"
			var removed []retention.Removal
			var err error
			if orphans {
				what = "orphan chunk sweep"
				removed, err = retention.SweepOrphans(ctx, s.store, s.policy, false, s.logger)
			} else {
				removed, err = retention.Sweep(ctx, s.store, s.sessions, s.policy, false, s.logger)
			}
			cancel()
			if err != nil {
				s.logger.Warn(what+" failed", "err", err, "removed", len(removed))
			} else if len(removed) > 0 {
				s.logger.Info(what, "removed", len(removed), "bytes", removedBytes(removed))
			}
		}
	}()
}

// removedBytes sums the sizes of rs.
func removedBytes(rs []retention.Removal) int64 {
	var n int64
	for _, r := range rs {
		n += r.Size
	}
	return n
}

func (s *sweeper) close() {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
}
