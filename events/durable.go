package events

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
)

// DurableOptions select what ReadDurable delivers.
type DurableOptions struct {
	// Name names the durable consumer: the auditor whose position the
	// server keeps. It must be a valid consumer name.
	Name string
	// Filters are subject filters (default: every session event). They
	// may change between runs.
	Filters []string
	// StartSeq or StartTime say where a new consumer begins (default: the
	// first event). A consumer that exists resumes where it left off, and
	// giving either then is an invalid_request error.
	StartSeq  uint64
	StartTime time.Time
	// Follow keeps delivering new events until ctx ends; otherwise
	// ReadDurable returns once nothing is pending.
	Follow bool
	// Provision, when set, makes the consumer (see ReadOptions.Provision);
	// it then takes exactly one filter.
	Provision Provisioner
}

// ReadDurable delivers events in stream order to fn through the named
// durable consumer and acknowledges each event fn returns nil for, so
// that the next ReadDurable with the same name resumes after the last
// acknowledged event. It stops at the first error fn returns, and returns
// it; that event and any after it are delivered again next time. On a log
// over several partitions it keeps one durable consumer of that name on
// each partition's stream its filters can match (see durablePartitions).
func (l *Log) ReadDurable(ctx context.Context, opts DurableOptions, fn func(Msg) error) error {
	if opts.Name == "" {
		return errcode.New(errcode.InvalidRequest, "durable consumer needs a name")
	}
	l, err := l.resolved(ctx)
	if err != nil {
		return err
	}
	stream := l.readStream()
	if stream == "" {
		return l.durablePartitions(ctx, opts, fn)
	}
	filters := opts.Filters
	if l.Partitions() > 1 && len(filters) > 0 {
		// One partition of several: the filters as they apply to it.
		filters = l.subjects.partitionFilters(filters)[l.part]
		if len(filters) == 0 {
			return nil // none matches in this partition
		}
	}
	if len(filters) == 0 {
		filters = []string{l.subjects.PartitionSessions(max(l.part, 0))}
	}
	if opts.Provision != nil && len(filters) != 1 {
		return errcode.New(errcode.InvalidRequest, "a provisioned durable consumer takes one filter, not %d", len(filters))
	}
	cfg := jetstream.ConsumerConfig{
		Durable:        opts.Name,
		Description:    "Paddock audit consumer",
		AckPolicy:      jetstream.AckExplicitPolicy,
		FilterSubjects: filters,
	}
	if len(filters) == 1 {
		// One filter goes in the API subject, where permissions can see it.
		cfg.FilterSubject, cfg.FilterSubjects = filters[0], nil
	}
	existing, err := l.js.Consumer(ctx, stream, opts.Name)
	switch {
	case err == nil:
		if opts.StartSeq > 0 || !opts.StartTime.IsZero() {
			return errcode.New(errcode.InvalidRequest, "durable consumer %s exists and resumes where it left off; a start position applies only when it is created", opts.Name)
		}
		prev := existing.CachedInfo().Config
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = prev.DeliverPolicy, prev.OptStartSeq, prev.OptStartTime
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		switch {
		case opts.StartSeq > 0:
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.StartSeq
		case !opts.StartTime.IsZero():
			t := opts.StartTime
			cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
		}
	default:
		return errcode.Wrap(errcode.Unavailable, err, "durable consumer "+opts.Name)
	}
	var cons jetstream.Consumer
	if opts.Provision != nil {
		spec := ConsumerSpec{Name: opts.Name, Filter: filters[0], StartSeq: cfg.OptStartSeq, Durable: true}
		if stream != l.stream {
			spec.Stream = stream
		}
		if cfg.OptStartTime != nil {
			spec.StartTime = *cfg.OptStartTime
		}
		if err = opts.Provision(ctx, spec); err == nil {
			cons, err = l.js.Consumer(ctx, stream, opts.Name)
		}
		var coded *errcode.Error
		if errors.As(err, &coded) {
			return err // the engine's answer to the provisioning request
		}
	} else {
		cons, err = l.js.CreateOrUpdateConsumer(ctx, stream, cfg)
	}
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "durable consumer "+opts.Name)
	}
	// Events delivered to an earlier run but never acknowledged would be
	// redelivered only after the ack wait, behind newer ones: start again
	// from the first unacknowledged event instead, in order.
	if _, err := l.js.ResetConsumer(ctx, stream, opts.Name); err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "reset durable consumer "+opts.Name)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "durable consumer info")
	}
	if !opts.Follow && info.NumPending == 0 {
		return nil
	}
	// Acks are published without waiting; make sure the last ones reach
	// the server before the caller closes the connection.
	defer func() { _ = l.js.Conn().FlushTimeout(5 * time.Second) }()
	return deliver(ctx, cons, opts.Follow, true, fn)
}

// durablePartitions is ReadDurable on a log over several partitions: a
// durable consumer of the same name on each partition's stream the
// filters can match, each keeping its own position, so a later read
// resumes every partition where it left off (see eachPartition).
func (l *Log) durablePartitions(ctx context.Context, opts DurableOptions, fn func(Msg) error) error {
	what := "durable consumer " + opts.Name + ": "
	return l.eachPartition(ctx, opts.Filters, opts.StartSeq, opts.Follow, what, func(ctx context.Context, k int, filters []string, fn func(Msg) error) error {
		o := opts
		o.Filters = filters
		return l.Partition(k).ReadDurable(ctx, o, fn)
	}, fn)
}
