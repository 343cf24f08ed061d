package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/images"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// Benchmarks run on the real engine and are skipped, never failed, when
// it does not answer or the base image cannot be had (they do not run in
// CI):
//
//	go test -run '^$' -bench . -benchtime 20x ./nodes/runtime/docker/

// benchEnv returns a client and the base image, or skips b.
func benchEnv(b *testing.B) (*client.Client, string) {
	b.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Skipf("no Docker client: %v", err)
	}
	b.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		b.Skipf("no Docker daemon answers: %v", err)
	}
	if _, err := cli.ImageInspect(ctx, images.Base); errdefs.IsNotFound(err) {
		if err := images.CheckBusybox(images.DefaultBusybox); err != nil {
			b.Skipf("no base image and none can be built: %v", err)
		}
	}
	return cli, testenv.SandboxBaseImage(b)
}

// benchRuntime returns a runtime on a node of its own whose containers are
// removed when the benchmark ends.
func benchRuntime(b *testing.B, cli *client.Client) *docker.Runtime {
	b.Helper()
	rt, err := docker.New(docker.Config{Client: cli, Node: "bench-" + uuid.NewString()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { testenv.RemoveContainers(b, cli, docker.LabelNode+"="+rt.Node()) })
	return rt
}

// measure runs op b.N times and reports its p50 and p99 latency. The
// cleanup op returns (may be nil) runs outside the timings.
func measure(b *testing.B, op func() (cleanup func(), err error)) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		cleanup, err := op()
		lat = append(lat, time.Since(t0))
		if cleanup != nil {
			b.StopTimer()
			cleanup()
			b.StartTimer()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// BenchmarkCreateStart compares a raw ContainerCreate+ContainerStart with
// the runtime's equivalent configuration against Runtime.Create (which
// also checks the image and the workspace root's owner, and resolves the
// user). Removal runs outside the timings.
func BenchmarkCreateStart(b *testing.B) {
	cli, image := benchEnv(b)
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		node := "bench-" + uuid.NewString()
		b.Cleanup(func() { testenv.RemoveContainers(b, cli, docker.LabelNode+"="+node) })
		pids, init := int64(docker.DefaultPidsLimit), true
		host := &container.HostConfig{
			CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges:true"}, NetworkMode: "none", Init: &init,
			LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
			Resources: container.Resources{Memory: docker.DefaultMemoryBytes, MemorySwap: docker.DefaultMemoryBytes, NanoCPUs: 1e9, PidsLimit: &pids},
		}
		measure(b, func() (func(), error) {
			session := uuid.NewString()
			cfg := &container.Config{
				Image: image, User: docker.DefaultUser, WorkingDir: runtime.DefaultWorkspaceRoot,
				Cmd:    []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"},
				Labels: map[string]string{docker.LabelNode: node, docker.LabelSession: session, docker.LabelTenant: "bench", docker.LabelEpoch: "1"},
			}
			c, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, docker.ContainerName("bench", session, 1))
			if err != nil {
				return nil, err
			}
			cleanup := func() { _ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) }
			return cleanup, cli.ContainerStart(ctx, c.ID, container.StartOptions{})
		})
	})
	b.Run("runtime", func(b *testing.B) {
		rt := benchRuntime(b, cli)
		measure(b, func() (func(), error) {
			sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image})
			if err != nil {
				return nil, err
			}
			return func() { _ = sb.Shutdown(ctx) }, nil
		})
	})
}

// BenchmarkExecTrue compares a raw exec create/attach/inspect of `true`
// with Sandbox.Exec of it (the wrapper, its leftover scan and the exit
// code check included), each in a container of its own.
func BenchmarkExecTrue(b *testing.B) {
	cli, image := benchEnv(b)
	ctx := context.Background()
	rt := benchRuntime(b, cli)
	newSandbox := func(b *testing.B) *docker.Sandbox {
		sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sb.Shutdown(ctx) })
		return sb.(*docker.Sandbox)
	}
	b.Run("raw", func(b *testing.B) {
		id := newSandbox(b).ID()
		measure(b, func() (func(), error) { return nil, rawExec(ctx, cli, id) })
	})
	b.Run("runtime", func(b *testing.B) {
		sb := newSandbox(b)
		measure(b, func() (func(), error) {
			_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}})
			return nil, err
		})
	})
}

// rawExec runs `true` in container id through the raw exec calls, with the
// options Sandbox.Exec would give it.
func rawExec(ctx context.Context, cli *client.Client, id string) error {
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true,
		User: docker.DefaultUser, WorkingDir: runtime.DefaultWorkspaceRoot,
	})
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

// BenchmarkExecRuntime isolates the runtime's share of exec: Sandbox.Exec
// of `true` against the raw exec create/attach/inspect with the same
// options, alternating in one container (so that drift hits both alike),
// no NATS and no events.
//
//	go test -run '^$' -bench BenchmarkExecRuntime -benchtime 150x ./nodes/runtime/docker/
func BenchmarkExecRuntime(b *testing.B) {
	cli, image := benchEnv(b)
	ctx := context.Background()
	rt := benchRuntime(b, cli)
	sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Shutdown(ctx)
	id := sb.(*docker.Sandbox).ID()
	var lr, lp []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, x := range []struct {
			fn  func() error
			lat *[]time.Duration
		}{
			{func() error { return rawExec(ctx, cli, id) }, &lr},
			{func() error { _, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"true"}}); return err }, &lp},
		} {
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

// smallArchive is a tar of a few small files and directories, the size of
// a seeded project.
func smallArchive(b *testing.B) []byte {
	b.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"src/", "src/pkg/", "docs/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 10 {
		data := bytes.Repeat([]byte{'x'}, 1000+i)
		name := fmt.Sprintf("src/pkg/f%d.txt", i)
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
			b.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			b.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkHydrate replaces a running sandbox's workspace with a small
// archive (13 members, 10 KB), alternating in one container (so that
// drift hits both alike) the former import (rm -rf of the workspace's
// entries as the sandbox user, then one archive copy into it) with
// ImportWorkspace (stage beside the root, then the commit's moves). The
// staged import removes what it replaced in the background: both wait
// until that is done, outside the timings. No NATS, no object store.
//
//	go test -run '^$' -bench BenchmarkHydrate -benchtime 30x ./nodes/runtime/docker/
func BenchmarkHydrate(b *testing.B) {
	cli, image := benchEnv(b)
	ctx := context.Background()
	rt := benchRuntime(b, cli)
	sbx, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image})
	if err != nil {
		b.Fatal(err)
	}
	defer sbx.Shutdown(ctx)
	sb := sbx.(*docker.Sandbox)
	data := smallArchive(b)
	former := func() error {
		res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"/bin/sh", "-c", "rm -rf /workspace/* /workspace/.[!.]* /workspace/..?*"}})
		if err != nil || res.ExitCode != 0 {
			return fmt.Errorf("rm: %v, exit %d", err, res.ExitCode)
		}
		pr, pw := io.Pipe()
		go func() {
			_, err := archive.CopyAs(pw, bytes.NewReader(data), archive.Limits{}, 65534, 65534)
			pw.CloseWithError(err)
		}()
		err = cli.CopyToContainer(ctx, sb.ID(), runtime.DefaultWorkspaceRoot, pr, container.CopyToContainerOptions{})
		pr.CloseWithError(err)
		return err
	}
	staged := func() error {
		_, err := sb.ImportWorkspace(ctx, bytes.NewReader(data), archive.Limits{})
		return err
	}
	settled := func() {
		for {
			res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"sh", "-c", "ls -A /.paddock 2>/dev/null"}})
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Stdout) == 0 {
				return
			}
		}
	}
	var lf, ls []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, x := range []struct {
			fn  func() error
			lat *[]time.Duration
		}{{former, &lf}, {staged, &ls}} {
			t0 := time.Now()
			if err := x.fn(); err != nil {
				b.Fatal(err)
			}
			*x.lat = append(*x.lat, time.Since(t0))
			b.StopTimer()
			settled()
			b.StartTimer()
		}
	}
	b.StopTimer()
	p50 := func(l []time.Duration) float64 {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		return float64(l[len(l)/2].Microseconds())
	}
	b.ReportMetric(p50(lf), "former-p50-µs")
	b.ReportMetric(p50(ls), "staged-p50-µs")
}

// BenchmarkRemove removes a file from a running and from a stopped
// sandbox (which Remove starts for the rm and stops again); the file is
// written again (through the archive endpoint, which works on a stopped
// container) outside the timings.
//
//	go test -run '^$' -bench BenchmarkRemove -benchtime 20x ./nodes/runtime/docker/
func BenchmarkRemove(b *testing.B) {
	cli, image := benchEnv(b)
	ctx := context.Background()
	rt := benchRuntime(b, cli)
	for _, stopped := range []bool{false, true} {
		name := map[bool]string{false: "running", true: "stopped"}[stopped]
		b.Run(name, func(b *testing.B) {
			sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Shutdown(ctx)
			if stopped {
				if err := sb.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if err := sb.WriteFile(ctx, "f", []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
			measure(b, func() (func(), error) {
				err := sb.Remove(ctx, "f", false)
				return func() {
					if err := sb.WriteFile(ctx, "f", []byte("x"), 0o644); err != nil {
						b.Fatal(err)
					}
				}, err
			})
		})
	}
}

// BenchmarkWriteDockerAPI writes 4 KiB through the Docker API (a runtime
// without the supervisor, as a write the sandbox's user may not do goes):
// directly in the workspace root, which needs no freeze, and in a
// directory below it, on a running sandbox, which the write freezes from
// its path's resolution to the extraction, and on a stopped one, which
// has nothing to freeze.
//
//	go test -run '^$' -bench BenchmarkWriteDockerAPI -benchtime 50x ./nodes/runtime/docker/
func BenchmarkWriteDockerAPI(b *testing.B) {
	cli, image := benchEnv(b)
	ctx := context.Background()
	rt := benchRuntime(b, cli)
	data := make([]byte, 4<<10)
	for _, c := range []struct {
		name    string
		path    string
		stopped bool
	}{{"root", "f", false}, {"subdir", "d/f", false}, {"subdir-stopped", "d/f", true}} {
		b.Run(c.name, func(b *testing.B) {
			sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Epoch: 1, Image: image})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Shutdown(ctx)
			if err := sb.Mkdir(ctx, "d", false); err != nil {
				b.Fatal(err)
			}
			if c.stopped {
				if err := sb.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			}
			measure(b, func() (func(), error) { return nil, sb.WriteFile(ctx, c.path, data, 0o644) })
		})
	}
}
