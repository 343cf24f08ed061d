package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
)

// Difference is one field on which the KV projection and the rebuild
// disagree.
type Difference struct {
	// Record names the record ("session <tenant>/<id>", "node <id>",
	// "stray") and Key its bucket key.
	Record string `json:"record"`
	Key    string `json:"key"`
	// Field is the record's JSON field; "" when the record is missing on
	// one side.
	Field  string `json:"field,omitempty"`
	KV     string `json:"kv"`
	Replay string `json:"replay"`
}

func (d Difference) String() string {
	if d.Field == "" {
		return fmt.Sprintf("%s (key %s): kv %s, replay %s", d.Record, d.Key, d.KV, d.Replay)
	}
	return fmt.Sprintf("%s (key %s): %s: kv %s, replay %s", d.Record, d.Key, d.Field, d.KV, d.Replay)
}

// Report is the outcome of Verify.
type Report struct {
	// Compared counts the records compared.
	Compared int `json:"compared"`
	// Differences lists every disagreement; empty means verified.
	Differences []Difference `json:"differences,omitempty"`
	// Unverifiable names the records whose history the stream no longer
	// holds from the start (retention): they cannot be rebuilt.
	Unverifiable []string `json:"unverifiable,omitempty"`
	// Newer names the KV records that took in events after the rebuild's
	// end (the system is live): they are not compared.
	Newer []string `json:"newer,omitempty"`
	// Reread counts the records read a second time, from their bucket's
	// stream leader, because the first read showed them behind the
	// rebuild (missing, or at an earlier stream sequence): on a cluster
	// that read may come from a replica still catching up.
	Reread int `json:"reread,omitempty"`
}

// Verify compares a rebuild with the projection in the buckets. The
// projector must have taken in every event up to res.UpTo (its checkpoint
// at or past it), or events it has not reached show as differences. It
// fails if a bucket cannot be read.
func Verify(ctx context.Context, b projector.Buckets, res Result) (Report, error) {
	var rep Report
	sessions, err := projector.ReadAll[projection.SessionRecord](ctx, b.Sessions, ">")
	if err != nil {
		return rep, err
	}
	nodes, err := projector.ReadAll[projection.NodeRecord](ctx, b.Nodes, ">")
	if err != nil {
		return rep, err
	}
	var stray projection.Ledger
	if e, err := b.State.Get(ctx, projector.StrayKey); err == nil {
		if err := json.Unmarshal(e.Value(), &stray); err != nil {
			return rep, fmt.Errorf("stray record: %w", err)
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return rep, err
	}

	sessionName := func(r projection.SessionRecord) string { return "session " + r.Tenant + "/" + r.ID }
	sessionSeq := func(r projection.SessionRecord) uint64 { return r.StreamSeq }
	if err := reread(ctx, b, b.Sessions, sessions, res.Set.Sessions, sessionSeq, &rep); err != nil {
		return rep, err
	}
	sessionUpTo := func(r projection.SessionRecord) uint64 {
		return res.upTo(events.PartitionOf(r.Tenant, r.ID, len(res.PartitionUpTo)))
	}
	compareAll(&rep, sessionUpTo, sessions, res.Set.Sessions, sessionName, sessionSeq, res.Truncated)
	nodeName := func(r projection.NodeRecord) string { return "node " + r.ID }
	nodeSeq := func(r projection.NodeRecord) uint64 { return r.StreamSeq }
	if err := reread(ctx, b, b.Nodes, nodes, res.Set.Nodes, nodeSeq, &rep); err != nil {
		return rep, err
	}
	// The node events, and so the stray ledger's, are on partition 0.
	nodeUpTo := func(projection.NodeRecord) uint64 { return res.upTo(0) }
	compareAll(&rep, nodeUpTo, nodes, res.Set.Nodes, nodeName, nodeSeq, res.TruncatedNode)
	if stray.StreamSeq <= res.upTo(0) {
		rep.Compared++
		rep.Differences = append(rep.Differences, compare("stray", projector.StrayKey, stray, stray.StreamSeq > 0, res.Set.Stray, res.Set.Stray.StreamSeq > 0)...)
	}
	return rep, nil
}

// reread reads again, from the leader of kvb's stream, each record that
// the first read (a KV watch) showed behind its rebuild: missing, or at an
// earlier stream sequence. A watch may be served by a replica that is
// still catching up after a restart; a record the leader has is what the
// projection holds. The leader's record replaces the first read's.
func reread[R any](ctx context.Context, b projector.Buckets, kvb jetstream.KeyValue, kv, replayed map[string]R, streamSeq func(R) uint64, rep *Report) error {
	for k, r := range replayed {
		if cur, in := kv[k]; in && streamSeq(cur) >= streamSeq(r) {
			continue
		}
		data, found, err := b.ReadLeader(ctx, kvb, k)
		if err != nil {
			return err
		}
		rep.Reread++
		if !found {
			continue
		}
		var rec R
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("bucket %s key %s: %w", kvb.Bucket(), k, err)
		}
		kv[k] = rec
	}
	return nil
}

// upTo is where the rebuild stopped in partition k's stream (UpTo on a
// log of one stream).
func (r Result) upTo(k int) uint64 {
	if k < len(r.PartitionUpTo) {
		return r.PartitionUpTo[k]
	}
	return r.UpTo
}

// compareAll compares every record of one kind, in KV or in the replay,
// except those the replay cannot rebuild (truncated) and those that took
// in events past where the rebuild stopped in their stream (upTo).
func compareAll[R any](rep *Report, upTo func(R) uint64, kv, replayed map[string]R, name func(R) string, streamSeq func(R) uint64, truncated func(R) bool) {
	for _, k := range unionKeys(kv, replayed) {
		kvRec, inKV := kv[k]
		rRec, inReplay := replayed[k]
		n := name(kvRec)
		if inReplay {
			n = name(rRec)
		}
		switch {
		case inReplay && truncated(rRec):
			rep.Unverifiable = append(rep.Unverifiable, n)
			continue
		case inKV && streamSeq(kvRec) > upTo(kvRec):
			rep.Newer = append(rep.Newer, n)
			continue
		}
		rep.Compared++
		rep.Differences = append(rep.Differences, compare(n, k, kvRec, inKV, rRec, inReplay)...)
	}
}

// compare reports the fields on which two records' JSON forms differ.
func compare(name, key string, kvRec any, inKV bool, rRec any, inReplay bool) []Difference {
	switch {
	case !inKV && !inReplay:
		return nil
	case !inKV:
		return []Difference{{Record: name, Key: key, KV: "missing", Replay: "present"}}
	case !inReplay:
		return []Difference{{Record: name, Key: key, KV: "present", Replay: "missing"}}
	}
	a, _ := json.Marshal(kvRec)
	b, _ := json.Marshal(rRec)
	if bytes.Equal(a, b) {
		return nil
	}
	var am, bm map[string]json.RawMessage
	_ = json.Unmarshal(a, &am)
	_ = json.Unmarshal(b, &bm)
	var out []Difference
	for _, f := range unionKeys(am, bm) {
		av, bv := am[f], bm[f]
		if !bytes.Equal(av, bv) {
			out = append(out, Difference{Record: name, Key: key, Field: f, KV: show(av), Replay: show(bv)})
		}
	}
	return out
}

func show(v json.RawMessage) string {
	if v == nil {
		return "(none)"
	}
	s := string(v)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func unionKeys[V, W any](a map[string]V, b map[string]W) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, dup := a[k]; !dup {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func sortedKeys[V any](m map[string]V) []string {
	return unionKeys(m, map[string]V(nil))
}
