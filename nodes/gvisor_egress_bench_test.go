package nodes_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkGVisorEgress compares, in one run, a sandbox's fetches through
// the node's egress proxy on the two container runtimes: docker (the node
// listens in the container's network namespace) and gvisor (the
// supervisor listens on gVisor's loopback and tunnels each connection
// over its unix socket to the node's proxy). Each op is one wget from
// inside the sandbox: of a 20 MiB file (download, MB/s) or of the
// server's small index page (connect: the connection's set-up through the
// proxy). Figures in docs/benchmarks.md.
func BenchmarkGVisorEgress(b *testing.B) {
	image := testenv.SandboxBaseImage(b)
	server, _ := webServer(b, image, "ok", 20)
	st := testenv.StartStack(b, testenv.StackOptions{NoNode: true})
	resolve := func(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{server}, nil }
	ctx := testenv.Context(b, 10*time.Minute)
	sessions := map[string]string{}
	for _, name := range []string{"docker", docker.NameGVisor} {
		node := "egress-" + name + "-bench-" + uuid.NewString()[:8]
		cfg := docker.Config{Client: testenv.DockerClient(b), Node: node,
			Supervisor: testenv.SupervisorBinary(b), SupervisorDir: testenv.SupervisorDir(b)}
		if name == docker.NameGVisor {
			cfg.GVisor = testenv.GVisorRuntime(b)
		}
		rt, err := docker.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		testenv.StartAgent(b, st.Broker.ClientURL(), nodes.Config{ID: node, Egress: nodes.EgressConfig{Resolve: resolve, RecordRate: 1000, RecordBurst: 1000}}, rt)
		s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: name, Image: image, Egress: &commands.Egress{Mode: "allow", Allow: []string{"web.test:80"}}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Client.Do(context.Background(), s.SessionID, commands.OpDelete, nil, nil) })
		sessions[name] = s.SessionID
	}
	get := func(b *testing.B, id, url string) {
		r, err := st.Client.Exec(ctx, id, commands.ExecArgs{Argv: []string{"wget", "-q", "-O", "/dev/null", url}, TimeoutMS: 120000})
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("wget %s: %+v, %v", url, r, err)
		}
	}
	for _, c := range []struct {
		name, runtime, url string
		size               int64
	}{
		{"download/docker-proxy", "docker", "http://web.test/big", 20 << 20},
		{"download/gvisor-tunnel", docker.NameGVisor, "http://web.test/big", 20 << 20},
		{"connect/docker-proxy", "docker", "http://web.test/", 0},
		{"connect/gvisor-tunnel", docker.NameGVisor, "http://web.test/", 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(c.size)
			for b.Loop() {
				get(b, sessions[c.runtime], c.url)
			}
		})
	}
}
