package nodes_test

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// portsServer runs busybox httpd in a container of image on a network of
// its own, on each of ports, serving body; it returns its address.
func portsServer(t *testing.T, image, body string, ports ...int) netip.Addr {
	t.Helper()
	ip, _ := httpdServer(t, image, body, "", ports...)
	return ip
}

// TestDockerEgressClusterEdges: whatever a sandbox's allow list says, its
// proxy refuses the NATS cluster's own ports at a private address (NATS's
// default route port, the port of the node's own NATS URL, a port the
// node is configured with), while other ports of the same address are
// reached; and an address the node gains after its proxies opened (the
// gateway of a Docker network made since) is refused as the node's own.
// Each refusal is recorded.
func TestDockerEgressClusterEdges(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "egress-edge-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 4*time.Minute)
	natsURL, err := url.Parse(st.Broker.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	natsPort, err := strconv.Atoi(natsURL.Port())
	if err != nil {
		t.Fatal(err)
	}
	const configured = 7777
	server := portsServer(t, image, "private-service", 80, 6222, natsPort, configured)
	startAgent(t, st, nodes.Config{ID: node, Egress: nodes.EgressConfig{ClusterPorts: []int{configured}}}, rt)

	// Every private range, on every port.
	allow := []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, Egress: &commands.Egress{Mode: "allow", Allow: allow}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Client.Do(testenv.Context(t, time.Minute), s.SessionID, commands.OpDelete, nil, nil) }()
	wget := func(target string) (string, bool) {
		t.Helper()
		r, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"wget", "-q", "-O", "-", "http://" + target + "/"}, TimeoutMS: 30000})
		if err != nil {
			t.Fatalf("exec wget %s: %v", target, err)
		}
		return r.Stdout + r.Stderr, r.ExitCode == 0
	}
	at := func(port int) string { return netip.AddrPortFrom(server, uint16(port)).String() }
	if body, ok := wget(at(80)); !ok || body != "private-service" {
		t.Fatalf("GET %s through the proxy = %q, ok %v; want the page (the list allows it)", at(80), body, ok)
	}

	// A Docker network made now, after the proxy opened: its gateway is
	// an address of this host.
	cli := testenv.DockerClient(t)
	netName := "paddock-egress-late-" + uuid.NewString()[:8]
	if _, err := cli.NetworkCreate(ctx, netName, network.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.NetworkRemove(context.Background(), netName) })
	ni, err := cli.NetworkInspect(ctx, netName, network.InspectOptions{})
	if err != nil || len(ni.IPAM.Config) == 0 || ni.IPAM.Config[0].Gateway == "" {
		t.Fatalf("the new network's gateway: %+v, %v", ni.IPAM.Config, err)
	}
	gw, err := netip.ParseAddr(ni.IPAM.Config[0].Gateway)
	if err != nil {
		t.Fatal(err)
	}
	gateway := netip.AddrPortFrom(gw, 8080).String()

	refused := map[string]string{ // target → what the reason names
		at(6222):       "port 6222",
		at(natsPort):   "port " + natsURL.Port(),
		at(configured): "port 7777",
		gateway:        "address of this node",
	}
	for target := range refused {
		if body, ok := wget(target); ok {
			t.Errorf("GET %s = %q: reached; want it refused", target, body)
		}
	}

	testenv.Eventually(t, 30*time.Second, func() error {
		got := map[string]egressRecord{}
		for _, e := range egressEvents(t, st, s.SessionID) {
			if e.finish == nil {
				return fmt.Errorf("egress to %s:%d: no finish yet", e.start.Host, e.start.Port)
			}
			got[netip.AddrPortFrom(netip.MustParseAddr(e.start.Host), uint16(e.start.Port)).String()] = e
		}
		for target, why := range refused {
			e, ok := got[target]
			if !ok {
				return fmt.Errorf("no egress record of %s", target)
			}
			if e.start.Allowed || e.finish.ErrorCode != string(errcode.PolicyDenied) || !strings.Contains(e.start.Reason, why) {
				t.Fatalf("egress to %s: allowed %v, reason %q, finish %s; want refused, naming %q, policy_denied", target, e.start.Allowed, e.start.Reason, e.finish.ErrorCode, why)
			}
		}
		if e, ok := got[at(80)]; !ok || !e.start.Allowed {
			return fmt.Errorf("the allowed GET of %s is not recorded as allowed", at(80))
		}
		return nil
	})
}
