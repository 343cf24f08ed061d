package nodes_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/runsc"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkRunscCheckpointNode measures memory checkpoints through the
// node (client, scheduler, node, object store, chain) for a runsc session
// holding 100 MiB of memory and a 1 MiB workspace file: a checkpoint that
// stops it (runsc checkpoint, scan and upload, manifest, finish), a resume
// (fetch and verify, runsc restore; on the same node, so its chunk cache
// serves the chunks), and a fork ×3 from a checkpoint of the running
// sandbox (three children restored at once on one node); and, as the
// baseline in the same run, a persist of the same sandbox (the workspace
// only). Run with -benchtime=1x: each iteration is many seconds.
//
//	go test -run '^$' -bench BenchmarkRunscCheckpointNode -benchtime=1x ./nodes/
func BenchmarkRunscCheckpointNode(b *testing.B) {
	image := testenv.SandboxBaseImage(b)
	node := "ckbench-" + uuid.NewString()[:8]
	rt := testenv.RunscRuntime(b, b.TempDir(), node)
	st := testenv.StartStack(b, testenv.StackOptions{NoNode: true})
	testenv.StartAgent(b, st.Broker.ClientURL(), nodes.Config{ID: node, CheckpointDir: b.TempDir()}, rt)
	ctx := testenv.Context(b, 30*time.Minute)
	var ckpt, resume, fork3, persist time.Duration
	var imageBytes int64
	for range b.N {
		b.StopTimer()
		s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: runsc.Name, Image: image, MemoryBytes: 512 << 20})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Client.WriteFile(ctx, s.SessionID, "data.bin", bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
			b.Fatal(err)
		}
		if res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: testenv.MemFillScript}); err != nil || res.ExitCode != 0 {
			b.Fatalf("fill: %+v, %v", res, err)
		}
		testenv.Eventually(b, 2*time.Minute, func() error {
			_, err := st.Client.ReadFile(ctx, s.SessionID, "full")
			return err
		})

		start := time.Now()
		if _, err := st.Client.Persist(ctx, s.SessionID); err != nil {
			b.Fatal(err)
		}
		persist += time.Since(start)

		start = time.Now()
		c, err := st.Client.Checkpoint(ctx, s.SessionID, commands.CheckpointArgs{})
		if err != nil {
			b.Fatal(err)
		}
		ckpt += time.Since(start)
		imageBytes += c.Snapshot.Memory.ImageBytes

		start = time.Now()
		if r, err := st.Client.Resume(ctx, s.SessionID, nil); err != nil || !r.Memory {
			b.Fatalf("resume = %+v, %v", r, err)
		}
		resume += time.Since(start)

		kept, err := st.Client.Checkpoint(ctx, s.SessionID, commands.CheckpointArgs{LeaveRunning: true})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		fk, err := st.Client.Fork(ctx, s.SessionID, commands.ForkRequest{N: 3, SnapshotID: kept.Snapshot.ID})
		if err != nil || len(fk.Children) != 3 || len(fk.Failed) != 0 {
			b.Fatalf("fork = %+v, %v", fk, err)
		}
		fork3 += time.Since(start)
		for _, id := range append(fk.Children, s.SessionID) {
			if err := st.Client.Delete(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(ckpt.Seconds()/n, "checkpoint-s")
	b.ReportMetric(resume.Seconds()/n, "resume-s")
	b.ReportMetric(fork3.Seconds()/n, "fork3-s")
	b.ReportMetric(persist.Seconds()/n, "persist-files-s")
	b.ReportMetric(float64(imageBytes)/n/(1<<20), "image-MiB")
	b.ReportMetric(0, "ns/op")
}
