package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/projector"
)

// The backup a repartition copies the one-stream history into before it
// replaces SBX_EVENTS: kept afterwards, for the operator to delete once
// audit verify is clean on the new layout.
const (
	repartitionBackup       = "SBX_EVENTS_PRE_PARTITIONS"
	repartitionBackupPrefix = "sbxprepartition"
	// repartitionDone is the backup's metadata key set once the copy onto
	// the partitions is whole: a later run must not start it over (the
	// deployment may have appended since).
	repartitionDone = "paddock_repartition_done"
)

// repartitionCmd is `engine events repartition --partitions N`: it moves a
// one-stream deployment, on a NATS deployment that runs without its
// engines (--nats-url), to N partitions in place (docs/scale.md).
//
// It refuses (invalid_state) while an engine is present in the partition
// leases or a node answers a heartbeat request, and a deployment that is
// partitioned already. Then:
//
//  1. copy SBX_EVENTS into the backup stream (events.Copy: bytes and
//     signatures unchanged) and check that it holds as many events;
//  2. delete SBX_EVENTS and make the N partitions' streams (same
//     replicas and max age);
//  3. copy the backup into them, each session into its partition;
//  4. delete the projection's buckets and the leases (their stream
//     sequences are the old stream's): the engines rebuild them.
//
// A run that stopped midway is run again: while the backup exists and
// SBX_EVENTS is no longer the one-stream original, the backup is the
// history, and steps 2-4 start over from it.
func repartitionCmd(ctx context.Context, g globals, n int, heartbeatWait time.Duration, jsonOut bool, stdout io.Writer) error {
	// With --json the steps are not told as they go: one object at the end.
	out := stdout
	if jsonOut {
		out = io.Discard
	}
	if n < 2 || n > events.MaxPartitions {
		return usageErr("--partitions %d: a repartition makes 2..%d partitions", n, events.MaxPartitions)
	}
	js, closeConn, err := dialJS(&g)
	if err != nil {
		return err
	}
	defer closeConn()
	if err := refuseRunning(ctx, js, heartbeatWait); err != nil {
		return err
	}
	backup := events.NewLog(js, repartitionBackup, repartitionBackupPrefix)
	orig, origErr := events.OpenLog(ctx, js, "", "")
	_, backupErr := js.Stream(ctx, repartitionBackup)
	haveBackup := backupErr == nil
	if backupErr != nil && !errors.Is(backupErr, jetstream.ErrStreamNotFound) {
		return errcode.Wrap(errcode.Unavailable, backupErr, "stream "+repartitionBackup)
	}
	var cfg jetstream.StreamConfig
	switch {
	case origErr == nil && orig.Partitions() == 1:
		// The original is intact: (re)make the backup from it.
		s, err := js.Stream(ctx, events.DefaultStream)
		if err != nil {
			return errcode.Wrap(errcode.Unavailable, err, "stream "+events.DefaultStream)
		}
		cfg = s.CachedInfo().Config
		if haveBackup {
			if err := js.DeleteStream(ctx, repartitionBackup); err != nil {
				return errcode.Wrap(errcode.Unavailable, err, "delete the unfinished backup "+repartitionBackup)
			}
		}
		if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Name: repartitionBackup, Prefix: repartitionBackupPrefix, Replicas: cfg.Replicas}); err != nil {
			return errcode.Wrap(errcode.Unavailable, err, "make the backup "+repartitionBackup)
		}
		st, err := events.Copy(ctx, orig, backup)
		if err != nil {
			return fmt.Errorf("copy %s into the backup: %w", events.DefaultStream, err)
		}
		if err := sameCount(ctx, js, events.DefaultStream, repartitionBackup); err != nil {
			return err
		}
		fmt.Fprintf(out, "backed up %d session events of %d sessions and %d node events into %s\n", st.SessionEvents, st.Sessions, st.NodeEvents, repartitionBackup)
	case haveBackup:
		// A run stopped after step 1: the backup is the history.
		s, err := js.Stream(ctx, repartitionBackup)
		if err != nil {
			return errcode.Wrap(errcode.Unavailable, err, "stream "+repartitionBackup)
		}
		cfg = s.CachedInfo().Config
		if v := cfg.Metadata[repartitionDone]; v != "" {
			return errcode.New(errcode.InvalidState, "the deployment was repartitioned already (onto %s partitions; %s is its backup): nothing to do", v, repartitionBackup)
		}
		fmt.Fprintf(out, "going on from the backup %s of an unfinished repartition\n", repartitionBackup)
	case origErr != nil:
		return fmt.Errorf("repartition: %w", origErr)
	default:
		return errcode.New(errcode.InvalidState, "the deployment has %d partitions already: a repartition moves a one-stream deployment", orig.Partitions())
	}
	// Step 2: the old layout's streams go (any partition a stopped run
	// made too), the new one's are made.
	for k := range events.MaxPartitions {
		name := events.PartitionStream("", k)
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return errcode.Wrap(errcode.Unavailable, err, "delete stream "+name)
		}
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Partitions: n, Replicas: cfg.Replicas, MaxAge: cfg.MaxAge}); err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "make the partitions' streams")
	}
	st, err := events.Copy(ctx, backup, events.NewLog(js, "", ""))
	if err != nil {
		return fmt.Errorf("copy the backup onto %d partitions (run the command again to start this step over): %w", n, err)
	}
	bs, err := js.Stream(ctx, repartitionBackup)
	if err == nil {
		bc := bs.CachedInfo().Config
		if bc.Metadata == nil {
			bc.Metadata = map[string]string{}
		}
		bc.Metadata[repartitionDone] = fmt.Sprint(n)
		_, err = js.UpdateStream(ctx, bc)
	}
	if err != nil {
		return errcode.Wrap(errcode.Unavailable, err, "mark the backup "+repartitionBackup+" done (the copy is whole)")
	}
	for _, b := range []string{projector.SessionsBucket, projector.NodesBucket, projector.StateBucket, projector.LeaseBucket} {
		if err := js.DeleteKeyValue(ctx, b); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return errcode.Wrap(errcode.Unavailable, err, "delete bucket "+b)
		}
	}
	fmt.Fprintf(out, "copied %d session events of %d sessions and %d node events onto %d partitions; the projection is rebuilt when the engines start\n", st.SessionEvents, st.Sessions, st.NodeEvents, n)
	fmt.Fprintf(out, "the backup %s is kept: delete it once `engine audit verify` and `engine replay --verify` are clean\n", repartitionBackup)
	if jsonOut {
		return printJSON(stdout, repartitionResult{Partitions: n, Sessions: st.Sessions, SessionEvents: st.SessionEvents, NodeEvents: st.NodeEvents, Backup: repartitionBackup})
	}
	return nil
}

// refuseRunning fails with invalid_state while an engine is present in
// the partition leases or a node answers a heartbeat request within wait.
func refuseRunning(ctx context.Context, js jetstream.JetStream, wait time.Duration) error {
	leases, err := projector.OpenLeases(ctx, js, "")
	switch {
	case err == nil:
		_, engines, err := leases.Read(ctx, "")
		if err != nil {
			return errcode.Wrap(errcode.Unavailable, err, "read the partition leases")
		}
		if len(engines) > 0 {
			return errcode.New(errcode.InvalidState, "engines are running (%s): stop every engine and node before a repartition", strings.Join(engines, ", "))
		}
	case !errors.Is(err, jetstream.ErrBucketNotFound):
		return errcode.Wrap(errcode.Unavailable, err, "read the partition leases")
	}
	nodes, err := operator.Heartbeats(ctx, js.Conn(), wait)
	if err != nil {
		return err
	}
	if len(nodes) > 0 {
		names := make([]string, len(nodes))
		for i, n := range nodes {
			names[i] = n.Node
		}
		return errcode.New(errcode.InvalidState, "nodes are running (%s): stop every engine and node before a repartition", strings.Join(names, ", "))
	}
	return nil
}

// sameCount fails unless streams a and b hold as many messages.
func sameCount(ctx context.Context, js jetstream.JetStream, a, b string) error {
	var counts [2]uint64
	for i, name := range []string{a, b} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return errcode.Wrap(errcode.Unavailable, err, "stream "+name)
		}
		counts[i] = s.CachedInfo().State.Msgs
	}
	if counts[0] != counts[1] {
		return errcode.New(errcode.InvalidState, "%s holds %d events, its copy %s %d: nothing was changed; run again", a, counts[0], b, counts[1])
	}
	return nil
}

// repartitionResult is events repartition's --json result.
type repartitionResult struct {
	Partitions    int    `json:"partitions"`
	Sessions      int    `json:"sessions"`
	SessionEvents int    `json:"session_events"`
	NodeEvents    int    `json:"node_events"`
	Backup        string `json:"backup"`
}
