package docker_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// benchPair returns a supervised docker runtime and a supervised gvisor
// runtime (loopfs disks where the host offers them, as agent-node's), on
// nodes of their own whose containers are removed when b ends.
func benchPair(b *testing.B, cli *client.Client) (plain, gvisor *docker.Runtime) {
	b.Helper()
	gv := testenv.GVisorRuntime(b)
	mk := func(oci string) *docker.Runtime {
		rt, err := docker.New(docker.Config{Client: cli, Node: "bench-" + uuid.NewString(), GVisor: oci,
			Supervisor: testenv.SupervisorBinary(b), SupervisorDir: testenv.SupervisorDir(b), DiskDir: testenv.DiskDir(b)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			rt.Close()
			testenv.RemoveContainers(b, cli, docker.LabelNode+"="+rt.Node())
		})
		return rt
	}
	return mk(""), mk(gv)
}

func p50µs(l []time.Duration) float64 {
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return float64(l[len(l)/2].Microseconds())
}

// BenchmarkGVisorExec compares Sandbox.Exec of `true` through the
// supervisor on the docker runtime (runc) and on the gvisor runtime
// (runsc), alternating in one run so that drift hits both alike.
//
//	go test -run '^$' -bench BenchmarkGVisorExec -benchtime 200x ./nodes/runtime/docker/
func BenchmarkGVisorExec(b *testing.B) {
	cli, image := benchEnv(b)
	ctx := context.Background()
	plain, gv := benchPair(b, cli)
	var sbs []runtime.Sandbox
	for _, rt := range []*docker.Runtime{plain, gv} {
		sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		sbs = append(sbs, sb)
	}
	lat := make([][]time.Duration, 2)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, sb := range sbs {
			t0 := time.Now()
			res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %+v, %v", res, err)
			}
			lat[j] = append(lat[j], time.Since(t0))
		}
	}
	b.StopTimer()
	d, g := p50µs(lat[0]), p50µs(lat[1])
	b.ReportMetric(d, "docker-p50-µs")
	b.ReportMetric(g, "gvisor-p50-µs")
	b.ReportMetric(g/d, "gvisor/docker")
}

// BenchmarkGVisorCreate compares a cold create (container, loopfs disk,
// start, supervisor hello) and its shutdown on the docker and the gvisor
// runtimes, alternating, and a create that claims a warm pool's gvisor
// container. Shutdowns and pool refills run outside the timings.
//
//	go test -run '^$' -bench BenchmarkGVisorCreate -benchtime 10x ./nodes/runtime/docker/
func BenchmarkGVisorCreate(b *testing.B) {
	cli, image := benchEnv(b)
	ctx := context.Background()
	plain, gv := benchPair(b, cli)
	_, pooled := benchPair(b, cli)
	if err := pooled.StartPools(ctx, docker.PoolConfig{Pools: []docker.PoolSpec{{Image: image, Size: 1}}}); err != nil {
		b.Fatal(err)
	}
	full := func() {
		testenv.Eventually(b, 2*time.Minute, func() error {
			if pooled.PoolFree()[image] < 1 {
				return context.DeadlineExceeded
			}
			return nil
		})
	}
	lat := make([][]time.Duration, 3)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		full()
		b.StartTimer()
		for j, rt := range []*docker.Runtime{plain, gv, pooled} {
			t0 := time.Now()
			sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image})
			if err != nil {
				b.Fatal(err)
			}
			lat[j] = append(lat[j], time.Since(t0))
			b.StopTimer()
			if _, pooledOne, _ := sb.(*docker.Sandbox).Provenance(); j == 2 && !pooledOne {
				b.Fatal("the pooled create did not claim")
			}
			if err := sb.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	d, g, p := p50µs(lat[0]), p50µs(lat[1]), p50µs(lat[2])
	b.ReportMetric(d, "docker-cold-p50-µs")
	b.ReportMetric(g, "gvisor-cold-p50-µs")
	b.ReportMetric(p, "gvisor-pool-p50-µs")
	b.ReportMetric(g/d, "gvisor/docker-cold")
}
