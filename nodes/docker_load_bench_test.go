package nodes_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// waitPool waits, with a deadline, until rt's pool of image holds n.
func waitPool(b *testing.B, rt *docker.Runtime, image string, n int) {
	b.Helper()
	testenv.Eventually(b, 2*time.Minute, func() error {
		if free := rt.PoolFree()[image]; free < n {
			return fmt.Errorf("the pool of %s holds %d, want %d", image, free, n)
		}
		return nil
	})
}

// BenchmarkDockerPoolCreate compares, alternating in one run, a create
// through the whole path that claims a warm-pool sandbox with a cold
// create of the same sandbox (on a node with the supervisor, and on one
// without, as before the pools). The shutdowns, and the pool's refill,
// happen outside the timings.
//
//	go test -run '^$' -bench BenchmarkDockerPoolCreate -benchtime 40x ./nodes/
func BenchmarkDockerPoolCreate(b *testing.B) {
	ctx := context.Background()
	pooled, rt, image := benchStack(b, 0, true, 1)
	supervised, _ := supervisedBenchStack(b, 0)
	plain, _ := dockerBenchStack(b, 0)
	create := func(st *testenv.Stack, refill bool) func() (func(), error) {
		return func() (func(), error) {
			c, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
			return func() {
				_ = st.Client.Shutdown(ctx, c.SessionID)
				if refill {
					waitPool(b, rt, image, 1)
				}
			}, err
		}
	}
	b.Run("vs-cold-supervised", func(b *testing.B) { measurePair(b, create(supervised, false), create(pooled, true)) })
	b.Run("vs-cold-plain", func(b *testing.B) { measurePair(b, create(plain, false), create(pooled, true)) })
}

// BenchmarkDockerExecLoad runs 20 sessions that each run `true` again and
// again for 10 s, through the whole path, on a Docker node with the
// supervisor and on one without (the daemon's exec path), one after the
// other in one run, and reports each one's sustained execs per second,
// p50 latency, and CPU per exec: this process's (node, NATS server and
// client, all in process) and the Docker daemon's (dockerd, containerd,
// the shims and what they reaped).
//
//	go test -run '^$' -bench BenchmarkDockerExecLoad -benchtime 1x -count 3 ./nodes/
func BenchmarkDockerExecLoad(b *testing.B) {
	const sessions, span = 20, 10 * time.Second
	ctx := context.Background()
	for _, kind := range []string{"supervisor", "docker-exec"} {
		b.Run(kind, func(b *testing.B) {
			var st *testenv.Stack
			var image string
			if kind == "supervisor" {
				st, image = supervisedBenchStack(b, 0)
			} else {
				st, image = dockerBenchStack(b, 0)
			}
			ids := make([]string, sessions)
			for i := range ids {
				c, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = c.SessionID
				defer st.Client.Shutdown(ctx, c.SessionID)
			}
			var lat []time.Duration
			var mu sync.Mutex
			var total time.Duration
			var selfCPU, daemonCPU time.Duration
			b.ResetTimer()
			for range b.N {
				self0, daemon0 := processCPU(), daemonCPUTime()
				t0 := time.Now()
				var wg sync.WaitGroup
				for _, id := range ids {
					wg.Go(func() {
						for time.Since(t0) < span {
							t := time.Now()
							if _, err := st.Client.Exec(ctx, id, commands.ExecArgs{Argv: []string{"true"}}); err != nil {
								b.Error(err)
								return
							}
							mu.Lock()
							lat = append(lat, time.Since(t))
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				total += time.Since(t0)
				selfCPU += processCPU() - self0
				daemonCPU += daemonCPUTime() - daemon0
			}
			b.StopTimer()
			n := float64(len(lat))
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(n/total.Seconds(), "execs/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(selfCPU.Microseconds())/n, "process-cpu-µs/exec")
			b.ReportMetric(float64(daemonCPU.Microseconds())/n, "daemon-cpu-µs/exec")
		})
	}
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// daemonCPUTime sums the CPU time of the Docker daemon's processes
// (dockerd, containerd, containerd-shim*, runc) from /proc.
func daemonCPUTime() time.Duration {
	tick := 100.0 // USER_HZ on Linux
	var sum float64
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		if name != "dockerd" && name != "containerd" && !strings.HasPrefix(name, "containerd-shim") && name != "runc" {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: utime is the
		// 12th, stime the 13th (with children: 14th, 15th).
		rest := string(stat)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+2:]
		}
		f := strings.Fields(rest)
		if len(f) < 15 {
			continue
		}
		for _, k := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseFloat(f[k], 64)
			sum += v
		}
	}
	return time.Duration(sum / tick * float64(time.Second))
}
