package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/provision"
	"github.com/paddock-dev/paddock/readiness"
	"github.com/paddock-dev/paddock/storage"
)

// projectorModule runs the projectors in `engine serve`, folding the
// events into the sbx_sessions and sbx_nodes buckets: with partition
// leases (the default), those of the partitions this engine holds the
// lease of (projector.Shared: the engines present share the partitions);
// without (--partition-lease-ttl 0), one per partition. Its start hook
// comes after the one that ensures the streams (serve lists it after that
// invoke), so the number of partitions is known there, and it stops first.
func projectorModule(cfg serveConfig, asked storage.Limits) fx.Option {
	return fx.Module("projector",
		fx.Invoke(func(lc fx.Lifecycle, js jetstream.JetStream, c conns, logger *slog.Logger) error {
			base := projector.Config{Name: projectorName(cfg.nodeID), Replicas: cfg.replicas}
			if err := base.Validate(); err != nil {
				return err
			}
			var (
				mu     sync.Mutex // guards ps and shared
				ps     []*projector.Projector
				shared *projector.Shared
				stop   context.CancelFunc
				done   chan struct{}
			)
			// The lag is the sum over the partitions this engine projects.
			lag := func(ctx context.Context) (uint64, error) {
				mu.Lock()
				defer mu.Unlock()
				if shared != nil {
					return shared.Lag(ctx)
				}
				if len(ps) == 0 {
					return 0, errors.New("projector: not started")
				}
				return projector.SumLag(ctx, ps)
			}
			if err := cfg.metrics.WatchProjector(lag); err != nil {
				return err
			}
			watchProjector(cfg.metrics, lag)
			plan := provision.Plan{Replicas: cfg.replicas, Asked: asked, Embedded: c.maxStore}
			lc.Append(fx.Hook{
				// The buckets get their limits before the projectors'
				// setup, which runs in the background, ensures them too.
				OnStart: func(ctx context.Context) error {
					if err := plan.EnsureBuckets(ctx, js, logger); err != nil {
						return err
					}
					n, err := projectedPartitions(ctx, js, cfg.eventPartitions)
					if err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					if cfg.partitionLeaseTTL > 0 {
						pc := base
						pc.Partitions = n
						s, err := projector.NewShared(js, projector.SharedConfig{
							Engine: base.Name, Projector: pc,
							Leases: projector.LeaseConfig{TTL: cfg.partitionLeaseTTL, Replicas: cfg.replicas},
						}, logger)
						if err != nil {
							return err
						}
						// The leases outlive the start hook's ctx: the
						// stop hook ends them.
						runCtx, cancel := context.WithCancel(context.Background())
						shared, stop, done = s, cancel, make(chan struct{})
						go func() { // ended by the stop hook
							defer close(done)
							_ = s.Run(runCtx) // returns nil once runCtx ends
						}()
						return nil
					}
					for k := range n {
						p, err := projector.New(js, base.PartitionConfig(n, k), logger)
						if err == nil {
							err = p.Start(ctx)
						}
						if err != nil {
							// No stop hook runs for a start that failed.
							for _, p := range ps {
								_ = p.Close(ctx)
							}
							ps = nil
							return err
						}
						ps = append(ps, p)
					}
					return nil
				},
				OnStop: func(ctx context.Context) error {
					mu.Lock()
					defer mu.Unlock()
					if shared != nil {
						stop()
						select {
						case <-done:
							return nil
						case <-ctx.Done():
							return fmt.Errorf("projector: partition leases not released: %w", ctx.Err())
						}
					}
					var errs []error
					for _, p := range ps {
						errs = append(errs, p.Close(ctx))
					}
					return errors.Join(errs...)
				},
			})
			return nil
		}),
	)
}

// projectedPartitions is the number of partitions the projectors fold:
// the flag's when given (the streams' start hook makes the deployment so,
// or refuses to start), else the deployment's, 1 for one not made yet (fx
// starts this module's hooks before the streams are ensured; the
// projectors' own setup waits for their streams).
func projectedPartitions(ctx context.Context, js jetstream.JetStream, flag int) (int, error) {
	if flag > 0 {
		return flag, nil
	}
	var log *events.Log
	err := readiness.RetryTransient(ctx, func(ctx context.Context) (err error) {
		log, err = events.OpenLog(ctx, js, "", "")
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return 1, nil
	case err != nil:
		return 0, err
	}
	return log.Partitions(), nil
}

// projectorName names an engine's projector (its durable consumer and
// checkpoint) after the engine's node id, so that engines sharing a NATS
// deployment each keep their own position.
func projectorName(nodeID string) string {
	name := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, nodeID)
	return projector.DefaultName + "_" + name
}

// projectorCmd is `engine projector status`.
func projectorCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "status" {
		return usageErr("usage: engine projector status [--json]")
	}
	var g globals
	fs := newFlagSet("projector status", stderr)
	g.register(fs, base)
	jsonOut := fs.Bool("json", false, "print the status as JSON")
	pos, _, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("projector status takes no arguments")
	}
	js, closeConn, err := dialJS(&g)
	if err != nil {
		return err
	}
	defer closeConn()
	last, sts, err := projector.ReadStatus(ctx, js, events.DefaultStream)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return errcode.New(errcode.Unavailable, "no projector has run: bucket %s does not exist", projector.StateBucket)
	}
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "projector status")
	}
	// The checkpoints are worth printing without the owners.
	owners, err := projector.ReadOwners(ctx, js)
	if err != nil {
		fmt.Fprintf(stderr, "projector status: the partition leases could not be read: %v\n", err)
	}
	if *jsonOut {
		return printJSON(stdout, struct {
			StreamLastSeq uint64             `json:"stream_last_seq"`
			Projectors    []projector.Status `json:"projectors"`
			Owners        []projector.Owner  `json:"partition_owners,omitempty"`
		}{last, sts, owners})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "PROJECTOR\tSTREAM\tCHECKPOINT\tLAG\tUPDATED\n")
	for _, s := range sts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", s.Name, s.Stream, s.StreamSeq, s.Lag, formatTime(s.UpdatedAt))
	}
	fmt.Fprintf(tw, "(events stream last seq %d)\n", last)
	printOwners(tw, owners)
	return tw.Flush()
}

// dialJS connects the CLI to the deployment's JetStream; the returned
// func closes the connection.
func dialJS(g *globals) (jetstream.JetStream, func(), error) {
	nc, _, err := dial(g)
	if err != nil {
		return nil, nil, err
	}
	if err := g.mayReadStream(); err != nil {
		nc.Close()
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, errcode.Wrap(errcode.Unavailable, err, "jetstream")
	}
	return js, nc.Close, nil
}
