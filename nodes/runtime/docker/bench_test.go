package docker_test

import (
	"context"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkExecRuntime isolates the runtime's share of exec: Sandbox.Exec
// of `true` against the raw exec create/attach/inspect with the same
// options, alternating in one container, no NATS and no events.
//
//	go test -run '^$' -bench BenchmarkExecRuntime -benchtime 150x ./nodes/runtime/docker/
func BenchmarkExecRuntime(b *testing.B) {
	cli := testenv.DockerClient(b)
	rt, err := docker.New(docker.Config{Client: cli, Node: "bench-" + uuid.NewString()[:8]})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: testenv.SandboxBaseImage(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Shutdown(ctx)
	id := sb.(*docker.Sandbox).ID()
	opts := container.ExecOptions{
		Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true,
		User: docker.DefaultUser, WorkingDir: runtime.DefaultWorkspaceRoot, Env: []string{"PADDOCK_EXEC=bench"},
	}
	raw := func() error {
		ex, err := cli.ContainerExecCreate(ctx, id, opts)
		if err != nil {
			return err
		}
		att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, att.Reader)
		att.Close()
		_, err = cli.ContainerExecInspect(ctx, ex.ID)
		return err
	}
	viaRuntime := func() error {
		_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}})
		return err
	}
	var lr, lp []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, x := range []struct {
			fn  func() error
			lat *[]time.Duration
		}{{raw, &lr}, {viaRuntime, &lp}} {
			t0 := time.Now()
			if err := x.fn(); err != nil {
				b.Fatal(err)
			}
			*x.lat = append(*x.lat, time.Since(t0))
		}
	}
	b.StopTimer()
	p50 := func(l []time.Duration) float64 {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		return float64(l[len(l)/2].Microseconds())
	}
	r, p := p50(lr), p50(lp)
	b.ReportMetric(r, "raw-p50-µs")
	b.ReportMetric(p, "runtime-p50-µs")
	b.ReportMetric(p-r, "overhead-p50-µs")
}
