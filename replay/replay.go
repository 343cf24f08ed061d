package replay

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
)

// Options bound a rebuild.
type Options struct {
	// UpToSeq stops after this stream sequence (0: the stream's last event
	// when the rebuild began).
	UpToSeq uint64
	// UpToTime, when set, stops before the first event stored after it.
	UpToTime time.Time
	// Filters restrict the rebuild to some subjects (default: every
	// session and node event).
	Filters []string
	// Each, when set, is called with every event folded, in order.
	Each func(events.Msg)
}

// Result is a rebuilt projection and what the stream held.
type Result struct {
	Set *projection.Set
	// FirstSeq and LastSeq are the stream's first and last sequences when
	// the rebuild began; FirstSeq > 1 means retention dropped events.
	FirstSeq, LastSeq uint64
	// UpTo is the stream sequence the rebuild stopped at.
	UpTo uint64
	// Events counts the events folded.
	Events uint64
	// PartitionUpTo is, for a partitioned log, the stream sequence the
	// rebuild stopped at in each partition (nil for one stream: UpTo).
	PartitionUpTo []uint64
}

// Truncated reports whether a session's history starts after its first
// event because the stream no longer holds the beginning: its first
// event taken in was rejected as not a create, while the stream has lost
// events to retention.
func (r Result) Truncated(rec projection.SessionRecord) bool {
	return r.FirstSeq > 1 && rec.Applied == 0 && len(rec.Problems) > 0 && rec.Problems[0].Kind == projection.ProblemNotCreatedFirst
}

// TruncatedNode is Truncated for a node whose registration is gone.
func (r Result) TruncatedNode(rec projection.NodeRecord) bool {
	return r.FirstSeq > 1 && rec.Applied == 0 && len(rec.Problems) > 0 && rec.Problems[0].Kind == projection.ProblemNotRegisteredFirst
}

var errDone = errors.New("done")

// batchSize is how many events a decode worker takes at a time.
const batchSize = 256

type batch struct {
	ds   []projection.Decoded
	done chan struct{} // closed once ds is decoded
}

// Rebuild folds the stream from its first event into a fresh Set. Events
// are decoded by GOMAXPROCS workers in parallel and folded in stream
// order. On a partitioned log it folds each partition in turn into the
// one Set (a session's events are all in one partition): FirstSeq is then
// the highest first sequence of any partition (above 1 when any lost
// events to retention), LastSeq and UpTo the sums over the partitions,
// and UpToSeq, a place in one stream, is refused (invalid_request). It
// fails if the stream cannot be read.
func Rebuild(ctx context.Context, log *events.Log, opts Options) (Result, error) {
	log, err := log.Resolve(ctx)
	if err != nil {
		return Result{}, err
	}
	if log.Partitions() == 1 {
		return rebuild(ctx, log, opts, projection.NewSet())
	}
	if opts.UpToSeq > 0 {
		return Result{}, errcode.New(errcode.InvalidRequest, "a stream sequence is a place in one of the %d event partitions: replay up to a time instead", log.Partitions())
	}
	all := Result{Set: projection.NewSet()}
	for k := range log.Partitions() {
		res, err := rebuild(ctx, log.Partition(k), opts, all.Set)
		all.FirstSeq = max(all.FirstSeq, res.FirstSeq)
		all.LastSeq += res.LastSeq
		all.UpTo += res.UpTo
		all.Events += res.Events
		all.PartitionUpTo = append(all.PartitionUpTo, res.UpTo)
		if err != nil {
			return all, err
		}
	}
	return all, nil
}

// rebuild folds one stream into set.
func rebuild(ctx context.Context, log *events.Log, opts Options, set *projection.Set) (Result, error) {
	info, err := log.StreamInfo(ctx)
	if err != nil {
		return Result{}, err
	}
	res := Result{Set: set, FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq}
	upTo := res.LastSeq
	if opts.UpToSeq > 0 && opts.UpToSeq < upTo {
		upTo = opts.UpToSeq
	}
	if upTo == 0 || info.State.Msgs == 0 {
		return res, nil
	}
	filters := opts.Filters
	if len(filters) == 0 {
		// The whole stream (it holds session and node events only); a
		// consumer without a subject filter is much cheaper for the server
		// than one filtering on wildcards.
		filters = []string{">"}
	}
	subj := log.Subjects()

	// read → (decode workers) → fold, in order: the reader hands each
	// batch to a worker and, in the same order, to the folder, which waits
	// for it to be decoded.
	work := make(chan *batch, 2*runtime.GOMAXPROCS(0))
	ordered := make(chan *batch, cap(work))
	free := make(chan *batch, cap(work)+2) // folded batches, for reuse
	var workers sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		workers.Add(1)
		go func() { // ends when work is closed
			defer workers.Done()
			for b := range work {
				for i := range b.ds {
					b.ds[i] = projection.Decode(subj, b.ds[i].Msg)
				}
				close(b.done)
			}
		}()
	}
	folded := make(chan struct{})
	go func() { // ends when ordered is closed
		defer close(folded)
		for b := range ordered {
			<-b.done
			for _, d := range b.ds {
				res.Set.Take(d)
				if opts.Each != nil {
					opts.Each(d.Msg)
				}
			}
			select {
			case free <- b:
			default:
			}
		}
	}()
	next := func() *batch {
		select {
		case b := <-free:
			clear(b.ds)
			b.ds, b.done = b.ds[:0], make(chan struct{})
			return b
		default:
			return &batch{ds: make([]projection.Decoded, 0, batchSize), done: make(chan struct{})}
		}
	}
	cur := next()
	flush := func() {
		if len(cur.ds) > 0 {
			work <- cur
			ordered <- cur
			cur = next()
		}
	}
	err = log.Read(ctx, events.ReadOptions{Filters: filters}, func(m events.Msg) error {
		if m.StreamSeq > upTo || !opts.UpToTime.IsZero() && m.Time.After(opts.UpToTime) {
			return errDone
		}
		cur.ds = append(cur.ds, projection.Decoded{Msg: m})
		res.UpTo = m.StreamSeq
		res.Events++
		if len(cur.ds) == batchSize {
			flush()
		}
		if m.StreamSeq == upTo {
			return errDone
		}
		return nil
	})
	flush()
	close(work)
	close(ordered)
	workers.Wait()
	<-folded
	if err != nil && !errors.Is(err, errDone) {
		return res, err
	}
	return res, nil
}

// Problem is a problem of a record, with the record's name.
type Problem struct {
	// Record names the record: "session <tenant>/<id>", "node <id>" or
	// "stray".
	Record string `json:"record"`
	projection.Problem
}

// Problems lists every problem of the set, by record.
func Problems(set *projection.Set) []Problem {
	var out []Problem
	for _, k := range sortedKeys(set.Sessions) {
		r := set.Sessions[k]
		for _, p := range r.Problems {
			out = append(out, Problem{Record: fmt.Sprintf("session %s/%s", r.Tenant, r.ID), Problem: p})
		}
	}
	for _, k := range sortedKeys(set.Nodes) {
		for _, p := range set.Nodes[k].Problems {
			out = append(out, Problem{Record: "node " + set.Nodes[k].ID, Problem: p})
		}
	}
	for _, p := range set.Stray.Problems {
		out = append(out, Problem{Record: "stray", Problem: p})
	}
	return out
}
