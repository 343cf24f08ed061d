package nodes_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// dockerBenchStack is a stack whose only node runs the Docker runtime.
func dockerBenchStack(b *testing.B, sync time.Duration) (*testenv.Stack, string) {
	b.Helper()
	image := testenv.SandboxBaseImage(b)
	node := "bench-" + uuid.NewString()[:8]
	rt, err := docker.New(docker.Config{Client: testenv.DockerClient(b), Node: node})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { testenv.RemoveContainers(b, testenv.DockerClient(b), docker.LabelNode+"="+node) })
	st := testenv.StartStack(b, testenv.StackOptions{
		Broker: broker.Config{SyncInterval: sync}, Node: nodes.Config{ID: node}, Runtimes: []runtime.Runtime{rt},
	})
	return st, image
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
// through the Engine API. Removal is outside the timer.
//
//	go test -run '^$' -bench BenchmarkDockerCreate -benchtime 30x ./nodes/
func BenchmarkDockerCreate(b *testing.B) {
	st, image := dockerBenchStack(b, 0)
	cli := testenv.DockerClient(b)
	ctx := context.Background()
	node := st.Agent.ID()
	for i := 0; i < 2; i++ { // warm up both paths
		c, _ := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
		_ = st.Client.Shutdown(ctx, c.SessionID)
	}
	b.Run("raw", func(b *testing.B) {
		cfg, host := rawConfig(image, node)
		var ids []string
		measure(b, func() error {
			c, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
			if err != nil {
				return err
			}
			ids = append(ids, c.ID)
			return cli.ContainerStart(ctx, c.ID, container.StartOptions{})
		})
		for _, id := range ids {
			_ = cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
		}
	})
	b.Run("paddock", func(b *testing.B) {
		var ids []string
		measure(b, func() error {
			c, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
			ids = append(ids, c.SessionID)
			return err
		})
		for _, id := range ids {
			_ = st.Client.Shutdown(ctx, id)
		}
	})
}

// BenchmarkDockerExec compares exec of `true` through the whole path with
// a direct exec create/attach/inspect in a container of the same kind.
//
//	go test -run '^$' -bench BenchmarkDockerExec -benchtime 200x ./nodes/
func BenchmarkDockerExec(b *testing.B) {
	for _, sync := range []struct {
		name     string
		interval time.Duration
	}{{"sync=always", 0}, {"sync=1s", time.Second}} {
		st, image := dockerBenchStack(b, sync.interval)
		cli := testenv.DockerClient(b)
		ctx := context.Background()
		b.Run("raw/"+sync.name, func(b *testing.B) {
			cfg, host := rawConfig(image, st.Agent.ID())
			c, err := cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
			if err != nil {
				b.Fatal(err)
			}
			defer cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
				b.Fatal(err)
			}
			measure(b, func() error {
				ex, err := cli.ContainerExecCreate(ctx, c.ID, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
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
			})
		})
		b.Run("paddock/"+sync.name, func(b *testing.B) {
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Client.Shutdown(ctx, s.SessionID)
			args := commands.ExecArgs{Argv: []string{"true"}}
			measure(b, func() error {
				_, err := st.Client.Exec(ctx, s.SessionID, args)
				return err
			})
		})
	}
}
