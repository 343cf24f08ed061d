package nodes_test

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// dockerBenchStack is a stack whose only node runs the Docker runtime
// through the Docker API alone.
func dockerBenchStack(b *testing.B, sync time.Duration) (*testenv.Stack, string) {
	b.Helper()
	st, _, image := benchStack(b, sync, false, 0)
	return st, image
}

// supervisedBenchStack is dockerBenchStack with the in-sandbox supervisor.
func supervisedBenchStack(b *testing.B, sync time.Duration) (*testenv.Stack, string) {
	b.Helper()
	st, _, image := benchStack(b, sync, true, 0)
	return st, image
}

// benchStack is a stack whose only node runs the Docker runtime, with the
// in-sandbox supervisor when supervised and a warm pool of pool containers
// of the base image (filled before it returns) when pool > 0; it returns
// the runtime and the image too. opts change the runtime's config.
func benchStack(b *testing.B, sync time.Duration, supervised bool, pool int, opts ...func(*docker.Config)) (*testenv.Stack, *docker.Runtime, string) {
	b.Helper()
	return benchStackNode(b, nodes.Config{}, sync, supervised, pool, opts...)
}

// benchStackNode is benchStack with the node's configuration (its ID is
// set here).
func benchStackNode(b *testing.B, ncfg nodes.Config, sync time.Duration, supervised bool, pool int, opts ...func(*docker.Config)) (*testenv.Stack, *docker.Runtime, string) {
	b.Helper()
	image := testenv.SandboxBaseImage(b)
	node := "bench-" + uuid.NewString()[:8]
	cfg := docker.Config{Client: testenv.DockerClient(b), Node: node}
	for _, o := range opts {
		o(&cfg)
	}
	if supervised {
		cfg.Supervisor, cfg.SupervisorDir = testenv.SupervisorBinary(b), testenv.SupervisorDir(b)
	}
	ncfg.ID = node
	rt, err := docker.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { testenv.RemoveContainers(b, testenv.DockerClient(b), docker.LabelNode+"="+node) })
	if pool > 0 {
		if err := rt.StartPools(context.Background(), docker.PoolConfig{Pools: []docker.PoolSpec{{Image: image, Size: pool}}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { rt.Close() })
	st := testenv.StartStack(b, testenv.StackOptions{
		Broker: broker.Config{SyncInterval: sync}, Node: ncfg, Runtimes: []runtime.Runtime{rt},
	})
	if pool > 0 {
		waitPool(b, rt, image, pool)
	}
	return st, rt, image
}

// rawConfig is the container a Paddock create makes, for the raw API
// baseline: the same image, command, hardening and labels.
func rawConfig(image, node string) (*container.Config, *container.HostConfig) {
	pids := int64(docker.DefaultPidsLimit)
	init := true
	return &container.Config{
			Image: image, User: docker.DefaultUser, WorkingDir: "/workspace",
			Cmd:    []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"},
			Labels: map[string]string{docker.LabelNode: node},
		}, &container.HostConfig{
			CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges:true"}, NetworkMode: "none", Init: &init,
			LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
			Resources: container.Resources{Memory: docker.DefaultMemoryBytes, MemorySwap: docker.DefaultMemoryBytes, NanoCPUs: 1e9, PidsLimit: &pids},
		}
}

// BenchmarkDockerCreate compares a session's create+start through the
// whole path (client → NATS → scheduler → node → Docker → events → reply)
// with ContainerCreate+ContainerStart of the same container straight
// through the Engine API, alternating the two. Removal is outside the
// timings.
//
//	go test -run '^$' -bench BenchmarkDockerCreate -benchtime 40x ./nodes/
func BenchmarkDockerCreate(b *testing.B) {
	st, image := dockerBenchStack(b, 0)
	cli := testenv.DockerClient(b)
	ctx := context.Background()
	cfg, host := rawConfig(image, st.Agent.ID())
	measurePair(b, func() (func(), error) {
		c, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
		if err != nil {
			return nil, err
		}
		rm := func() { _ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) }
		return rm, cli.ContainerStart(ctx, c.ID, container.StartOptions{})
	}, func() (func(), error) {
		c, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
		return func() { _ = st.Client.Shutdown(ctx, c.SessionID) }, err
	})
}

// BenchmarkDockerExec compares exec of `true` through the whole path with
// a direct exec create/attach/inspect in a container of the same kind,
// alternating the two, under both sync settings.
//
//	go test -run '^$' -bench BenchmarkDockerExec -benchtime 150x ./nodes/
func BenchmarkDockerExec(b *testing.B) {
	for _, sync := range syncModes {
		b.Run(sync.name, func(b *testing.B) {
			st, image := dockerBenchStack(b, sync.interval)
			ctx := context.Background()
			id := rawContainer(b, image, st.Agent.ID())
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Client.Shutdown(ctx, s.SessionID)
			args := commands.ExecArgs{Argv: []string{"true"}}
			measurePair(b, rawExec(ctx, b, id, []string{"true"}), func() (func(), error) {
				_, err := st.Client.Exec(ctx, s.SessionID, args)
				return nil, err
			})
		})
	}
}

// BenchmarkDockerProcEcho is BenchmarkProcEcho on the Docker runtime: a
// line typed into an interactive sh in a container until its answer is
// back, through the runtime's process directly and through Paddock.
//
//	go test -run '^$' -bench BenchmarkDockerProcEcho -benchtime 200x ./nodes/
func BenchmarkDockerProcEcho(b *testing.B) {
	for _, sync := range syncModes {
		st, image := dockerBenchStack(b, sync.interval)
		ctx := context.Background()
		rt, err := docker.New(docker.Config{Client: testenv.DockerClient(b), Node: st.Agent.ID()})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("direct/"+sync.name, func(b *testing.B) {
			sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: st.Agent.ID(), Image: image})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Shutdown(ctx)
			benchEchoDirect(b, sb)
		})
		b.Run("paddock/"+sync.name, func(b *testing.B) {
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Client.Shutdown(ctx, s.SessionID)
			benchEchoPaddock(b, st.Client, s.SessionID)
		})
	}
}

// BenchmarkDockerExecStream compares a streaming exec of 100 MB of output
// through Paddock (client.ExecStream, every byte brought to the caller)
// with the raw Engine API's exec of the same command, its output copied
// to io.Discard, in the same run (MB/s: higher is better).
//
//	go test -run '^$' -bench BenchmarkDockerExecStream -benchtime 5x ./nodes/
func BenchmarkDockerExecStream(b *testing.B) {
	const size = 100_000_000
	st, image := dockerBenchStack(b, time.Second)
	cli := testenv.DockerClient(b)
	ctx := context.Background()
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Client.Shutdown(ctx, s.SessionID)
	cmd := []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}
	b.Run("docker-exec", func(b *testing.B) {
		cfg, host := rawConfig(image, st.Agent.ID())
		c, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
		if err != nil {
			b.Fatal(err)
		}
		defer cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		for b.Loop() {
			ex, err := cli.ContainerExecCreate(ctx, c.ID, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true, User: docker.DefaultUser})
			if err != nil {
				b.Fatal(err)
			}
			att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
			if err != nil {
				b.Fatal(err)
			}
			n, _ := stdcopy.StdCopy(io.Discard, io.Discard, att.Reader)
			att.Close()
			if n != size {
				b.Fatalf("copied %d bytes", n)
			}
		}
	})
	b.Run("paddock-stream", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			var n int
			_, err := st.Client.ExecStream(ctx, s.SessionID, commands.ExecArgs{Argv: cmd}, func(_ bool, p []byte) { n += len(p) })
			if err != nil || n != size {
				b.Fatalf("streamed %d bytes: %v", n, err)
			}
		}
	})
}

// rawContainer starts the container a Paddock create makes (rawConfig)
// through the Engine API, removed when the benchmark ends, and returns its
// id.
func rawContainer(b *testing.B, image, node string) string {
	b.Helper()
	cli := testenv.DockerClient(b)
	ctx := context.Background()
	cfg, host := rawConfig(image, node)
	c, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		b.Fatal(err)
	}
	return c.ID
}

// rawExec runs cmd in container id through exec create/attach/inspect
// with the options the runtime's Docker path gives (user, working
// directory, a marker variable), so that only Paddock's part differs.
func rawExec(ctx context.Context, b *testing.B, id string, cmd []string) func() (func(), error) {
	cli := testenv.DockerClient(b)
	opts := container.ExecOptions{
		Cmd: cmd, AttachStdout: true, AttachStderr: true,
		User: docker.DefaultUser, WorkingDir: "/workspace", Env: []string{"PADDOCK_EXEC=bench"},
	}
	return func() (func(), error) {
		ex, err := cli.ContainerExecCreate(ctx, id, opts)
		if err != nil {
			return nil, err
		}
		att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, att.Reader)
		att.Close()
		_, err = cli.ContainerExecInspect(ctx, ex.ID)
		return nil, err
	}
}

// BenchmarkDockerSupervisor compares, alternating in one run, operations
// through the whole path on a Docker node with the in-sandbox supervisor
// against the daemon's own path: exec `true` against a raw exec
// create/attach/inspect in a container of the same kind, and a read and
// a write of 4 KiB against the same through a node without the
// supervisor (the archive endpoints). They alternate in blocks of 20 (see
// measureBlocks).
//
//	go test -run '^$' -bench BenchmarkDockerSupervisor -benchtime 200x ./nodes/
func BenchmarkDockerSupervisor(b *testing.B) {
	ctx := context.Background()
	sup, image := supervisedBenchStack(b, 0)
	plain, _ := dockerBenchStack(b, 0)
	session := func(st *testenv.Stack) string {
		s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Client.Shutdown(ctx, s.SessionID) })
		return s.SessionID
	}
	ss, ps := session(sup), session(plain)
	b.Run("exec-true", func(b *testing.B) {
		id := rawContainer(b, image, plain.Agent.ID())
		args := commands.ExecArgs{Argv: []string{"true"}}
		measureBlocks(b, 20, rawExec(ctx, b, id, []string{"true"}), func() (func(), error) {
			_, err := sup.Client.Exec(ctx, ss, args)
			return nil, err
		})
	})
	data := make([]byte, 4096)
	for _, st := range []*testenv.Stack{sup, plain} {
		id := map[*testenv.Stack]string{sup: ss, plain: ps}[st]
		if _, err := st.Client.WriteFile(ctx, id, "f", data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("read-4KiB", func(b *testing.B) {
		measureBlocks(b, 20, func() (func(), error) {
			_, err := plain.Client.ReadFile(ctx, ps, "f")
			return nil, err
		}, func() (func(), error) {
			_, err := sup.Client.ReadFile(ctx, ss, "f")
			return nil, err
		})
	})
	b.Run("write-4KiB", func(b *testing.B) {
		measureBlocks(b, 20, func() (func(), error) {
			_, err := plain.Client.WriteFile(ctx, ps, "f", data, 0o644)
			return nil, err
		}, func() (func(), error) {
			_, err := sup.Client.WriteFile(ctx, ss, "f", data, 0o644)
			return nil, err
		})
	})
}
