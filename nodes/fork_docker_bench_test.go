package nodes_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkDockerFork8 forks a 100 MiB workspace (100 files of 1 MiB of
// random bytes) into 8 children on one Docker node with a warm pool of
// 9 (the parent's and the 8 children's), until all 8 are running, from a
// snapshot the parent recorded: layer, the workspace in the container's
// layer (a child's restore writes a tar through the daemon); loopfs, each
// sandbox on a 1 GiB loopfs disk (the node writes the child's workspace on
// its own mount of the disk); loopfs-kept, the same on a node that keeps
// restored trees (the first child's restore writes the snapshot's tree
// once, every child mounts it as an overlay). The pool is refilled, and the children
// deleted, outside the timings. child_create_ms is the mean of the
// children's create durations as their finish events record them (the
// claim of a pooled sandbox and the restore).
//
//	go test -run '^$' -bench BenchmarkDockerFork8 -benchtime 3x ./nodes/
func BenchmarkDockerFork8(b *testing.B) {
	b.Run("layer", func(b *testing.B) { benchDockerFork8(b, nodes.Config{}) })
	loopfs := func(b *testing.B) func(*docker.Config) {
		return func(c *docker.Config) { c.DiskDir, c.DefaultDiskBytes = testenv.DiskDir(b), 1<<30 }
	}
	b.Run("loopfs", func(b *testing.B) { benchDockerFork8(b, nodes.Config{}, loopfs(b)) })
	b.Run("loopfs-kept", func(b *testing.B) {
		benchDockerFork8(b, nodes.Config{TreeCacheDir: b.TempDir()}, loopfs(b))
	})
}

func benchDockerFork8(b *testing.B, ncfg nodes.Config, opts ...func(*docker.Config)) {
	const pool = 9
	st, rt, image := benchStackNode(b, ncfg, 0, true, pool, opts...)
	ctx := testenv.Context(b, 30*time.Minute)
	p, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
	if err != nil {
		b.Fatal(err)
	}
	// The parent goes before the runtime closes: a sandbox outlives its
	// node, so closing leaves its loopfs disk mounted.
	b.Cleanup(func() {
		if err := st.Client.Delete(testenv.Context(b, time.Minute), p.SessionID); err != nil {
			b.Errorf("delete the parent: %v", err)
		}
	})
	buf := make([]byte, 1<<20)
	for i := range 100 {
		_, _ = rand.Read(buf)
		if _, err := st.Client.WriteFrom(ctx, p.SessionID, fmt.Sprintf("d%d/f%03d.bin", i%10, i), bytes.NewReader(buf), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	snap, err := st.Client.Persist(ctx, p.SessionID)
	if err != nil {
		b.Fatal(err)
	}
	pooled, createMS := 0, 0.0
	for b.Loop() {
		b.StopTimer()
		waitPool(b, rt, image, pool)
		b.StartTimer()
		res, err := st.Client.Fork(ctx, p.SessionID, commands.ForkRequest{N: 8, SnapshotID: snap.ID})
		if err != nil || len(res.Children) != 8 {
			b.Fatalf("fork: %v, %d children, failed %+v", err, len(res.Children), res.Failed)
		}
		b.StopTimer()
		for _, c := range res.Children {
			evs, err := st.Log.Session(ctx, "default", c)
			if err != nil {
				b.Fatal(err)
			}
			for _, ev := range evs {
				if ev.Op == string(commands.OpCreate) && bytes.Contains(ev.Data, []byte(`"pooled":true`)) {
					pooled++
				}
				if ev.Op == string(commands.OpCreate) && ev.DurationMS != nil {
					createMS += *ev.DurationMS
				}
			}
			if err := st.Client.Delete(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.Logf("%d forks: %.1f ms/op, child_create_ms %.0f, pooled_frac %.3f", b.N, float64(b.Elapsed().Milliseconds())/float64(b.N), createMS/float64(8*b.N), float64(pooled)/float64(8*b.N))
	b.ReportMetric(float64(pooled)/float64(8*b.N), "pooled_frac")
	b.ReportMetric(createMS/float64(8*b.N), "child_create_ms") // each child's create on the node: claim + restore
}
