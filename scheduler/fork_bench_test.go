package scheduler_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/testenv"
)

// forkWorkspace makes a session with files of 1 MiB of random bytes (nothing
// to deduplicate or compress) on st's node.
func forkWorkspace(b *testing.B, st *testenv.Stack, files int) string {
	b.Helper()
	ctx := testenv.Context(b, 5*time.Minute)
	p, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range files {
		_, _ = rand.Read(buf)
		if _, err := st.Client.WriteFrom(ctx, p.SessionID, fmt.Sprintf("d%d/f%03d.bin", i%10, i), bytes.NewReader(buf), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return p.SessionID
}

// BenchmarkFork8 forks a 100 MiB workspace (100 files of 1 MiB) into 8
// children on one node (local runtime), until all 8 are running: with
// the parent persisting first (persist), and from a snapshot it recorded
// (from).
func BenchmarkFork8(b *testing.B) {
	st := testenv.StartStack(b, testenv.StackOptions{})
	parent := forkWorkspace(b, st, 100)
	ctx := testenv.Context(b, 30*time.Minute)
	snap, err := st.Client.Persist(ctx, parent)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		req  commands.ForkRequest
	}{
		{"persist", commands.ForkRequest{N: 8}},
		{"from", commands.ForkRequest{N: 8, SnapshotID: snap.ID}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var children []string
			for b.Loop() {
				res, err := st.Client.Fork(ctx, parent, bc.req)
				if err != nil || len(res.Children) != 8 {
					b.Fatalf("fork: %v, %d children, failed %+v", err, len(res.Children), failedOf(res))
				}
				children = append(children, res.Children...)
			}
			b.StopTimer()
			for _, c := range children { // the node's capacity is for the next round
				if err := st.Client.Delete(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkForkStoredBytes reports the workspace bucket's stored bytes
// after a 100 MiB workspace is forked into 8 children that each change
// 1 MiB and persist, over the workspace's own bytes (stored_x; the goal of
// issue 25 is at most 1.1).
func BenchmarkForkStoredBytes(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		st := testenv.StartStack(b, testenv.StackOptions{})
		parent := forkWorkspace(b, st, 100)
		ctx := testenv.Context(b, 30*time.Minute)
		b.StartTimer()
		res, err := st.Client.Fork(ctx, parent, commands.ForkRequest{N: 8})
		if err != nil || len(res.Children) != 8 {
			b.Fatalf("fork: %v", err)
		}
		buf := make([]byte, 1<<20)
		for _, c := range res.Children {
			_, _ = rand.Read(buf)
			if _, err := st.Client.WriteFrom(ctx, c, "d0/f000.bin", bytes.NewReader(buf), 0o644); err != nil {
				b.Fatal(err)
			}
			if _, err := st.Client.Persist(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		info, err := st.JS.Stream(ctx, objectstore.StreamName(objectstore.DefaultBucket))
		if err != nil {
			b.Fatal(err)
		}
		si, err := info.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(si.State.Bytes)/float64(100<<20), "stored_x")
		b.ReportMetric(float64(si.State.Bytes)/(1<<20), "stored_MiB")
		b.StartTimer()
	}
}

func failedOf(res commands.ForkResult) []string {
	var out []string
	for _, f := range res.Failed {
		out = append(out, f.SessionID+": "+string(f.Error.Code)+": "+f.Error.Message)
	}
	return out
}
