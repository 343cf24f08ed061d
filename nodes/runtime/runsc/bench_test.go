package runsc_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkMemoryCheckpoint measures, for a sandbox holding 100 MiB of
// memory (and a 1 MiB workspace): a checkpoint (processes, memory and
// workspace; the sandbox stops), a restore on another runtime instance
// (another node), a fork ×3 (three restores of the checkpoint at once on
// one node), and, as the baseline in the same run, a files-only stop and
// resume of the same sandbox (export the workspace, shut down, create
// anew, import it). Run with -benchtime=1x: each iteration is seconds.
//
//	go test -run '^$' -bench BenchmarkMemoryCheckpoint -benchtime=3x ./nodes/runtime/runsc/
func BenchmarkMemoryCheckpoint(b *testing.B) {
	node1, node2 := newRuntime(b), newRuntime(b)
	var ckpt, restore, fork3, files time.Duration
	var imageBytes, wsBytes int64
	for i := range b.N {
		b.StopTimer()
		sp := spec(b, fmt.Sprintf("b%d", i))
		sbx, err := node1.Create(b.Context(), sp)
		if err != nil {
			b.Fatal(err)
		}
		sb := sbx.(interface {
			runtime.Sandbox
			runtime.Checkpointer
		})
		if err := sb.WriteFile(b.Context(), "data.bin", bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
			b.Fatal(err)
		}
		if res, err := sb.Exec(b.Context(), runtime.ExecSpec{Argv: []string{"sh", "-c", testenv.MemFillScript}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("fill: %v %+v", err, res)
		}
		testenv.Eventually(b, 2*time.Minute, func() error {
			_, _, err := sb.ReadFile(b.Context(), "full", 16)
			return err
		})

		// Baseline: files only.
		start := time.Now()
		var tar bytes.Buffer
		if _, err := sb.ExportWorkspace(b.Context(), &tar, nil); err != nil {
			b.Fatal(err)
		}
		sp2 := spec(b, fmt.Sprintf("b%d-files", i))
		fresh, err := node2.Create(b.Context(), sp2)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fresh.ImportWorkspace(b.Context(), &tar, archive.DefaultLimits()); err != nil {
			b.Fatal(err)
		}
		files += time.Since(start)
		shutdown(b, fresh)

		dir := b.TempDir()
		start = time.Now()
		info, err := sb.Checkpoint(b.Context(), dir, false)
		if err != nil {
			b.Fatal(err)
		}
		ckpt += time.Since(start)
		imageBytes += info.ImageBytes
		wsBytes += info.WorkspaceBytes
		shutdown(b, sb)

		start = time.Now()
		r, err := node2.Restore(b.Context(), spec(b, fmt.Sprintf("b%d-r", i)), dir)
		if err != nil {
			b.Fatal(err)
		}
		restore += time.Since(start)
		shutdown(b, r)

		start = time.Now()
		var g errgroup.Group
		copies := make([]runtime.Sandbox, 3)
		for k := range copies {
			g.Go(func() error {
				c, err := node1.Restore(b.Context(), spec(b, fmt.Sprintf("b%d-f%d", i, k)), dir)
				copies[k] = c
				return err
			})
		}
		err = g.Wait()
		fork3 += time.Since(start)
		for _, c := range copies {
			if c != nil {
				shutdown(b, c)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(ckpt.Seconds()/n, "checkpoint-s")
	b.ReportMetric(restore.Seconds()/n, "restore-s")
	b.ReportMetric(fork3.Seconds()/n, "fork3-s")
	b.ReportMetric(files.Seconds()/n, "files-stop-resume-s")
	b.ReportMetric(float64(imageBytes)/n/(1<<20), "image-MiB")
	b.ReportMetric(float64(wsBytes)/n/(1<<20), "workspace-MiB")
	b.ReportMetric(0, "ns/op")
}
