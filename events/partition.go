package events

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/paddock-dev/paddock/errcode"
)

// A deployment's session events are spread over N partitions, chosen when
// the deployment is made (--event-partitions). Each partition is a stream
// of its own, so a Raft group with a leader of its own, and a session's
// events all go to one partition, the one PartitionOf names: the
// per-session guard (ExpectLastSequenceForSubject), the hash chain and the
// per-session replay see one stream as before.
//
//	N = 1 (the default, and every deployment made before partitions):
//	  SBX_EVENTS    <prefix>.evt.<t>.<s>.<op>.<phase>, <prefix>.nodeevt.>
//	N > 1:
//	  SBX_EVENTS    <prefix>.pevt.0.<t>.<s>.<op>.<phase>, <prefix>.nodeevt.>
//	  SBX_EVENTS_k  <prefix>.pevt.k.<t>.<s>.<op>.<phase>       (k = 1..N-1)
//
// The partition is a token of the subject because two streams may not
// capture overlapping subjects: the hash alone cannot route a message.
// N is stored in the metadata of the first stream (PartitionsMetadata),
// which every engine and node can read (stream info): OpenLog reads it, so
// every process agrees on N without a flag of its own.

// MaxPartitions bounds N: the node and auditor permissions name every
// partition's stream (auth), and a partition is a Raft group on every
// server that holds a replica.
const MaxPartitions = 16

// PartitionsMetadata is the key in the first events stream's metadata that
// holds the deployment's number of partitions ("1" when absent).
const PartitionsMetadata = "paddock_event_partitions"

// PartitionOf is the partition of a session's events among n: FNV-1a of
// tenant, a zero byte and session, modulo n. This is the one place the
// mapping is computed; changing it moves sessions between streams, which
// only a repartition may do.
func PartitionOf(tenant, session string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(tenant))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(session))
	return int(h.Sum32() % uint32(n))
}

// PartitionStream is the stream of partition k of the events stream
// named base: base itself for partition 0, base_k for the others.
func PartitionStream(base string, k int) string {
	if base == "" {
		base = DefaultStream
	}
	if k == 0 {
		return base
	}
	return base + "_" + strconv.Itoa(k)
}

// ValidatePartitions checks a number of partitions (0 means 1).
func ValidatePartitions(n int) error {
	if n < 0 || n > MaxPartitions {
		return errcode.New(errcode.InvalidRequest, "event partitions %d outside 1..%d", n, MaxPartitions)
	}
	return nil
}

func (s Subjects) parts() int { return max(s.Partitions, 1) }

// partitionOf is the partition of a session under s.
func (s Subjects) partitionOf(tenant, session string) int {
	return PartitionOf(tenant, session, s.parts())
}

// sessionRoot is the subjects' stem of a session event: <prefix>.evt for
// one partition, <prefix>.pevt.<k> with several.
func (s Subjects) sessionRoot(k int) string {
	if s.parts() == 1 {
		return s.prefix() + ".evt"
	}
	return s.prefix() + ".pevt." + strconv.Itoa(k)
}

// PartitionSessions matches every session event of partition k.
func (s Subjects) PartitionSessions(k int) string { return s.sessionRoot(k) + ".>" }

// filterPartition is the partition a filter of session events can match
// (ok false: any, or the filter is not one of session events).
func (s Subjects) filterPartition(filter string) (int, bool) {
	if s.parts() == 1 {
		return 0, true
	}
	rest, ok := strings.CutPrefix(filter, s.prefix()+".pevt.")
	if !ok {
		return 0, false
	}
	tok, _, _ := strings.Cut(rest, ".")
	k, err := strconv.Atoi(tok)
	if err != nil || k < 0 || k >= s.parts() {
		return 0, false
	}
	return k, true
}

// Partitions is the number of partitions of the log (1: unpartitioned).
func (l *Log) Partitions() int { return l.subjects.parts() }

// Streams are the log's streams, partition 0 (which holds the node
// events) first.
func (l *Log) Streams() []string {
	out := make([]string, l.Partitions())
	for k := range out {
		out[k] = PartitionStream(l.stream, k)
	}
	return out
}

// WithPartitions returns a copy of the log over n partitions (n <= 1: one,
// today's layout). It does not check that the streams exist: OpenLog reads
// n from the deployment.
func (l *Log) WithPartitions(n int) *Log {
	c := *l
	c.subjects.Partitions = max(n, 1)
	c.part = -1
	c.disc = nil
	return &c
}

// Partition returns the log of partition k alone: its reads and durable
// consumers are on that one stream (a projector's or auditor's consumer
// per partition). It panics on a k outside the log's partitions, a
// programming error.
func (l *Log) Partition(k int) *Log {
	if k < 0 || k >= l.Partitions() {
		panic(fmt.Sprintf("events: partition %d of %d", k, l.Partitions()))
	}
	c := *l
	c.part = k
	return &c
}

// streamOf is the stream holding a session's events.
func (l *Log) streamOf(tenant, session string) string {
	return PartitionStream(l.stream, l.subjects.partitionOf(tenant, session))
}

// readStream is the one stream a read or durable consumer of this log is
// on: partition 0 (the only one) of an unpartitioned log, or the
// partition Partition chose; "" for a log over several.
func (l *Log) readStream() string {
	switch {
	case l.Partitions() == 1:
		return l.stream
	case l.part >= 0:
		return PartitionStream(l.stream, l.part)
	}
	return ""
}

// OpenLog returns the log of the deployment whose first events stream is
// stream (DefaultStream when empty): over as many partitions as that
// stream's metadata says (one when it says nothing, as every deployment
// made before partitions). Its error is unavailable when the stream
// cannot be read.
func OpenLog(ctx context.Context, js jetstream.JetStream, stream, prefix string) (*Log, error) {
	l := NewLog(js, stream, prefix)
	l.disc = nil
	s, err := js.Stream(ctx, l.stream)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "events stream "+l.stream)
	}
	n, err := partitionsOf(s.CachedInfo().Config.Metadata)
	if err != nil {
		return nil, fmt.Errorf("events stream %s: %w", l.stream, err)
	}
	return l.WithPartitions(n), nil
}

// errBadPartitions is metadata whose partitions value is not a number in
// range.
var errBadPartitions = errors.New("bad " + PartitionsMetadata + " metadata")

func partitionsOf(md map[string]string) (int, error) {
	v, ok := md[PartitionsMetadata]
	if !ok {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxPartitions {
		return 0, fmt.Errorf("%w: %q", errBadPartitions, v)
	}
	return n, nil
}

// partitionFilters maps filters to the partitions they can match, each
// filter rewritten for its partition: a filter naming a partition goes to
// it alone, one with a wildcard partition (or <prefix>.pevt.>) to each. An
// unpartitioned filter (<prefix>.evt.<t>.<s>...) is read as the same
// filter on the partitioned subjects: to the session's partition when it
// names a tenant and session, else to each. A filter of node events goes
// to partition 0, the one stream holding them.
func (s Subjects) partitionFilters(filters []string) map[int][]string {
	out := map[int][]string{}
	all := s.prefix() + ".pevt."
	for _, f := range filters {
		if rest, ok := strings.CutPrefix(f, s.prefix()+".evt."); ok {
			if rest == ">" {
				f = all + ">"
			} else {
				tok := strings.SplitN(rest, ".", 3)
				if len(tok) >= 2 && literal(tok[0]) && literal(tok[1]) {
					k := PartitionOf(tok[0], tok[1], s.parts())
					out[k] = append(out[k], s.sessionRoot(k)+"."+rest)
					continue
				}
				f = all + "*." + rest
			}
		}
		if k, ok := s.filterPartition(f); ok {
			out[k] = append(out[k], f)
			continue
		}
		if strings.HasPrefix(f, s.prefix()+".nodeevt.") {
			out[0] = append(out[0], f) // the node events are on partition 0 alone
			continue
		}
		for k := range s.parts() {
			switch {
			case f == all+">":
				out[k] = append(out[k], s.PartitionSessions(k))
			case strings.HasPrefix(f, all+"*."):
				out[k] = append(out[k], s.sessionRoot(k)+strings.TrimPrefix(f, all+"*"))
			default:
				out[k] = append(out[k], f) // not a session filter: let the server judge it
			}
		}
	}
	return out
}

// readPartitions is Read on a log over several partitions: each partition
// its filters can match is read through a consumer of its own (see
// eachPartition).
func (l *Log) readPartitions(ctx context.Context, opts ReadOptions, fn func(Msg) error) error {
	if len(opts.After) > 0 {
		// A resumption: each partition's place is in After, or its
		// start is the read's first one (a time, or the beginning).
		opts.StartSeq = 0
	}
	return l.eachPartition(ctx, opts.Filters, opts.StartSeq, opts.Follow, "", func(ctx context.Context, k int, filters []string, fn func(Msg) error) error {
		o := opts
		o.Filters = filters
		return l.Partition(k).Read(ctx, o, fn)
	}, fn)
}

// eachPartition runs read on each partition the filters (default: every
// session event) can match, with the filters rewritten for it. Without
// follow the partitions are read one after another, in partition order;
// with follow all at once, fn called by one at a time. Order holds within
// each partition, so within each session. A start sequence names a place
// in one stream, so it takes filters of one partition (invalid_request,
// its message led by what).
func (l *Log) eachPartition(ctx context.Context, filters []string, startSeq uint64, follow bool, what string,
	read func(ctx context.Context, k int, filters []string, fn func(Msg) error) error, fn func(Msg) error) error {
	if len(filters) == 0 {
		filters = []string{l.subjects.AllSessions()}
	}
	byPart := l.subjects.partitionFilters(filters)
	if startSeq > 0 && len(byPart) > 1 {
		return errcode.New(errcode.InvalidRequest, "%sa start sequence names a place in one partition's stream; the filters match %d partitions", what, len(byPart))
	}
	parts := make([]int, 0, len(byPart))
	for k := range l.Partitions() {
		if _, ok := byPart[k]; ok {
			parts = append(parts, k)
		}
	}
	if !follow {
		for _, k := range parts {
			if err := read(ctx, k, byPart[k], fn); err != nil {
				return err
			}
		}
		return nil
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	for _, k := range parts {
		g.Go(func() error {
			return read(gctx, k, byPart[k], func(m Msg) error {
				mu.Lock()
				defer mu.Unlock()
				return fn(m)
			})
		})
	}
	err := g.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// literal reports whether a filter token is no wildcard.
func literal(tok string) bool { return tok != "*" && tok != ">" }

// discovery is what a log made by NewLog learned of its deployment's
// partitions, shared by the log's copies.
type discovery struct {
	mu sync.Mutex // guards n
	n  int        // 0: not learned yet
}

// Resolve returns the log as its deployment is partitioned (see
// resolved): a reader that works partition by partition (replay) calls
// it before it asks Partitions. Its error is unavailable when the first
// stream cannot be read.
func (l *Log) Resolve(ctx context.Context) (*Log, error) { return l.resolved(ctx) }

// resolved is the log as its deployment is partitioned: a log made by
// NewLog reads the first stream's metadata on its first use (once; until
// the stream exists it stays unpartitioned, as before partitions), so
// every reader and writer agrees with the deployment without a flag.
//
// Each lookup is bounded by discoverTry and made without the lock: a
// cluster that has not elected its JetStream meta leader yet drops the
// request unanswered, and a lookup bounded only by a node's two-minute
// start, holding the lock, kept the node from registering and every
// append behind it waiting (CI's compose deployment); bounded, it fails
// unavailable and its caller tries again.
func (l *Log) resolved(ctx context.Context) (*Log, error) {
	if l.disc == nil {
		return l, nil
	}
	l.disc.mu.Lock()
	n := l.disc.n
	l.disc.mu.Unlock()
	if n == 0 {
		dctx, cancel := context.WithTimeout(ctx, discoverTry)
		found, err := existingPartitions(dctx, l.js, l.stream)
		cancel()
		if err != nil {
			return nil, err
		}
		if found == 0 {
			return l, nil // no stream yet: what is done on it fails as before
		}
		l.disc.mu.Lock()
		l.disc.n, n = found, found
		l.disc.mu.Unlock()
	}
	if n == 1 {
		return l, nil
	}
	return l.WithPartitions(n), nil
}

// discoverTry bounds one lookup of the deployment's partitions.
const discoverTry = 5 * time.Second
