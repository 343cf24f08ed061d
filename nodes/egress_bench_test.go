package nodes_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkDockerEgress compares, in one run, a sandbox's download of a
// 100 MiB file from a web server on a Docker network: through the node's
// egress proxy (egress allow), and direct (a sandbox with an open network
// joined to the server's network). Each op is one wget of the file, from
// inside the sandbox; MB/s is the figure (docs/benchmarks.md). The
// connect sub-benchmarks fetch the server's small index page, where the
// time is the connection's set-up.
func BenchmarkDockerEgress(b *testing.B) {
	image := testenv.SandboxBaseImage(b)
	server, netName := webServer(b, image, "ok", 100)
	node := "egress-bench-" + uuid.NewString()[:8]
	rt, err := docker.New(docker.Config{Client: testenv.DockerClient(b), Node: node})
	if err != nil {
		b.Fatal(err)
	}
	st := testenv.StartStack(b, testenv.StackOptions{NoNode: true})
	resolve := func(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{server}, nil }
	testenv.StartAgent(b, st.Broker.ClientURL(), nodes.Config{ID: node, Policy: nodes.Policy{AllowNetwork: true}, Egress: nodes.EgressConfig{Resolve: resolve, RecordRate: 1000, RecordBurst: 1000}}, rt)
	ctx := testenv.Context(b, 10*time.Minute)

	proxied, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, Egress: &commands.Egress{Mode: "allow", Allow: []string{"web.test:80"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = st.Client.Do(context.Background(), proxied.SessionID, commands.OpDelete, nil, nil) }()
	direct, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, Egress: &commands.Egress{Mode: "open"}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = st.Client.Do(context.Background(), direct.SessionID, commands.OpDelete, nil, nil) }()
	cli := testenv.DockerClient(b)
	list, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", docker.LabelSession+"="+direct.SessionID))})
	if err != nil || len(list) != 1 {
		b.Fatalf("the direct sandbox's container: %v, %d found", err, len(list))
	}
	if err := cli.NetworkConnect(ctx, netName, list[0].ID, &network.EndpointSettings{}); err != nil {
		b.Fatal(err)
	}

	get := func(b *testing.B, id string, argv ...string) {
		r, err := st.Client.Exec(ctx, id, commands.ExecArgs{Argv: argv, TimeoutMS: 120000})
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("%v: %+v, %v", argv, r, err)
		}
	}
	for _, c := range []struct {
		name, id, url string
		size          int64
	}{
		{"download/proxy", proxied.SessionID, "http://web.test/big", 100 << 20},
		{"download/direct", direct.SessionID, fmt.Sprintf("http://%s/big", server), 100 << 20},
		{"connect/proxy", proxied.SessionID, "http://web.test/", 0},
		{"connect/direct", direct.SessionID, fmt.Sprintf("http://%s/", server), 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(c.size)
			for b.Loop() {
				get(b, c.id, "wget", "-q", "-O", "/dev/null", c.url)
			}
		})
	}
}
