package nodes_test

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/testenv"
)

// testResolver stands in for DNS: it answers the test's names and
// remembers every name it was asked.
type testResolver struct {
	mu    sync.Mutex
	names map[string][]netip.Addr
	asked []string
}

func (r *testResolver) resolve(_ context.Context, name string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, name)
	if a, ok := r.names[name]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", name)
}

func (r *testResolver) wasAsked(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.asked, name)
}

// webServer runs busybox httpd in a container of image on a network of
// its own (a stand-in for the internet), serving body as its index page
// and a file "big" of bigMB MiB, and returns its address there and the
// network's name.
func webServer(t testing.TB, image, body string, bigMB int) (netip.Addr, string) {
	t.Helper()
	return httpdServer(t, image, body, fmt.Sprintf(" && dd if=/dev/zero of=/tmp/www/big bs=1M count=%d 2>/dev/null", bigMB), 80)
}

// httpdServer runs busybox httpd in a container of image on a network of
// its own, on each of ports, serving /tmp/www: body as its index page,
// and whatever the shell commands setup (each starting " && ") put
// there. It returns the server's address, once every port answers, and
// the network's name.
func httpdServer(t testing.TB, image, body, setup string, ports ...int) (netip.Addr, string) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	cli := testenv.DockerClient(t)
	name := "paddock-egress-test-" + uuid.NewString()[:8]
	if _, err := cli.NetworkCreate(ctx, name, network.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.NetworkRemove(context.Background(), name) })
	script := fmt.Sprintf("mkdir -p /tmp/www && printf '%%s' %q > /tmp/www/index.html", body) + setup
	for _, p := range ports[1:] {
		script += fmt.Sprintf(" && httpd -p %d -h /tmp/www", p)
	}
	script += fmt.Sprintf(" && exec httpd -f -p %d -h /tmp/www", ports[0])
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"sh", "-c", script}, User: "0"},
		&container.HostConfig{NetworkMode: container.NetworkMode(name)}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	in, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(in.NetworkSettings.Networks[name].IPAddress)
	if err != nil {
		t.Fatalf("the web server's address: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, p := range ports {
			if _, err := get(netip.AddrPortFrom(ip, uint16(p)).String()); err != nil {
				return err
			}
		}
		return nil
	})
	return ip, name
}

// TestDockerEgressAllowList: a sandbox with egress mode allow reaches the
// names, wildcards and ports of its list through the node's proxy, and
// nothing else: not a near miss of a wildcard, not a raw address, not a
// name off the list (which is never even looked up), not the metadata
// address, the node's NATS port or another sandbox even when an entry
// names them, and not anything at all without the proxy. Every decision
// is in the session's events. A resume with a new list changes what it
// reaches.
func TestDockerEgressAllowList(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	server, _ := webServer(t, image, "hello-from-the-internet", 0)
	node := "egress-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 4*time.Minute)
	natsURL, _ := url.Parse(st.Broker.ClientURL())
	res := &testResolver{names: map[string][]netip.Addr{
		"allowed.test":        {server},
		"api.wild.test":       {server},
		"denied.test":         {server},
		"meta.wild.test":      {netip.MustParseAddr("169.254.169.254")},
		"nats.wild.test":      {netip.MustParseAddr("127.0.0.1")},
		"v6.wild.test":        {netip.MustParseAddr("::1")},
		"wild.test.evil.test": {server},
	}}
	startAgent(t, st, nodes.Config{ID: node, Policy: nodes.Policy{AllowNetwork: true}, Egress: nodes.EgressConfig{Resolve: res.resolve}}, rt)

	// Another sandbox, with an open network, serving on its bridge address.
	other, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, Egress: &commands.Egress{Mode: "open"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = st.Client.Do(testenv.Context(t, time.Minute), other.SessionID, commands.OpDelete, nil, nil)
	}()
	out, err := st.Client.Exec(ctx, other.SessionID, commands.ExecArgs{Argv: []string{"hostname", "-i"}})
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("the open sandbox's address: %+v, %v", out, err)
	}
	otherIP := strings.Fields(out.Stdout)[0]

	allow := []string{"allowed.test:80", "*.wild.test", "169.254.169.254", otherIP + ":80"}
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, Egress: &commands.Egress{Mode: "allow", Allow: allow}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Client.Do(testenv.Context(t, time.Minute), s.SessionID, commands.OpDelete, nil, nil) }()

	fetch := func(argv ...string) (string, bool) {
		t.Helper()
		r, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: argv, TimeoutMS: 30000})
		if err != nil {
			t.Fatalf("exec %v: %v", argv, err)
		}
		return r.Stdout + r.Stderr, r.ExitCode == 0
	}
	wget := func(u string) (string, bool) { return fetch("wget", "-q", "-O", "-", u) }

	for _, u := range []string{"http://allowed.test/", "http://api.wild.test/"} {
		if body, ok := wget(u); !ok || body != "hello-from-the-internet" {
			t.Errorf("GET %s through the proxy = %q, ok %v; want the server's page", u, body, ok)
		}
	}
	refused := []string{
		"http://denied.test/",                           // not on the list
		"http://allowed.test:8080/",                     // on the list for port 80 only
		"http://wild.test.evil.test/",                   // a wildcard's near miss
		"http://" + server.String() + "/",               // a raw address not on the list
		"http://169.254.169.254/",                       // metadata, though an entry names it
		"http://meta.wild.test/",                        // a wildcard name that resolves to metadata
		"http://nats.wild.test:" + natsURL.Port() + "/", // the node's NATS port
		"http://v6.wild.test/",                          // the node's IPv6 loopback
		"http://[::1]/",                                 // a raw IPv6 address
		"http://" + otherIP + "/",                       // another sandbox, though an entry names it
	}
	for _, u := range refused {
		if body, ok := wget(u); ok {
			t.Errorf("GET %s = %q: reached; want it refused", u, body)
		}
	}
	if res.wasAsked("denied.test") || res.wasAsked("wild.test.evil.test") {
		t.Errorf("names off the list were looked up: %v", res.asked)
	}
	// Without the proxy there is no network at all.
	if body, ok := fetch("env", "-u", "http_proxy", "-u", "HTTP_PROXY", "wget", "-q", "-O", "-", "http://"+server.String()+"/"); ok {
		t.Errorf("a direct GET of %s = %q: reached; want no network", server, body)
	}

	// Every decision is recorded: allowed ones with the bytes they
	// carried, refused ones with policy_denied.
	var evs []egressRecord
	testenv.Eventually(t, 30*time.Second, func() error {
		// A finish is appended once the sandbox has its answer.
		evs = egressEvents(t, st, s.SessionID)
		for _, e := range evs {
			if e.finish == nil {
				return fmt.Errorf("egress to %s: no finish yet", e.start.Host)
			}
		}
		return nil
	})
	allowed, denied := 0, 0
	for _, e := range evs {
		switch {
		case e.start.Allowed && e.finish != nil && e.finish.OK != nil && *e.finish.OK:
			f, err := events.DecodeData[events.EgressFinish](*e.finish)
			if err != nil || f.BytesIn == 0 || f.BytesOut == 0 {
				t.Errorf("allowed egress to %s finished with %+v, %v; want bytes both ways", e.start.Host, f, err)
			}
			allowed++
		case !e.start.Allowed && e.finish != nil && e.finish.ErrorCode == string(errcode.PolicyDenied):
			if e.start.Reason == "" {
				t.Errorf("refused egress to %s records no reason", e.start.Host)
			}
			denied++
		default:
			t.Errorf("egress record %+v: finish %+v", e.start, e.finish)
		}
	}
	if allowed != 2 || denied != len(refused) {
		t.Errorf("egress records: %d allowed, %d refused; want 2 and %d", allowed, denied, len(refused))
	}

	// A resume with a new list: what was refused is reached, and what was
	// reached is refused.
	if err := st.Client.Stop(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.ResumeWith(ctx, s.SessionID, commands.ResumeArgs{Egress: &commands.Egress{Mode: "allow", Allow: []string{"denied.test"}}}); err != nil {
		t.Fatal(err)
	}
	if body, ok := wget("http://denied.test/"); !ok || body != "hello-from-the-internet" {
		t.Errorf("GET denied.test after the resume that allows it = %q, %v", body, ok)
	}
	if body, ok := wget("http://allowed.test/"); ok {
		t.Errorf("GET allowed.test after the resume that dropped it = %q: reached", body)
	}
	// To open from allow needs a new sandbox: refused while it is there.
	if _, err := st.Client.ResumeWith(ctx, s.SessionID, commands.ResumeArgs{Egress: &commands.Egress{Mode: "open"}}); errcode.Of(err) != errcode.InvalidState {
		t.Errorf("resume to egress open with the sandbox there: %v; want invalid_state", err)
	}
}

type egressRecord struct {
	start  events.EgressStart
	finish *events.Event
}

// egressEvents returns the session's egress records, each start with
// its finish.
func egressEvents(t *testing.T, st *testenv.Stack, id string) []egressRecord {
	t.Helper()
	evs, err := st.Log.Session(testenv.Context(t, 10*time.Second), "default", id)
	if err != nil {
		t.Fatal(err)
	}
	var out []egressRecord
	at := map[string]int{}
	for _, ev := range evs {
		if ev.Op != string(commands.OpEgress) {
			continue
		}
		if ev.Phase == events.PhaseStart {
			d, err := events.DecodeData[events.EgressStart](ev)
			if err != nil {
				t.Fatal(err)
			}
			at[ev.SpanID] = len(out)
			out = append(out, egressRecord{start: d})
			continue
		}
		if i, ok := at[ev.SpanID]; ok {
			out[i].finish = &ev
		}
	}
	return out
}

// TestEgressRefusals: bad policies are invalid_request; an open network
// the node's policy does not permit, and an allow list on the local
// runtime (which has no isolation to enforce it with), are policy_denied.
func TestEgressRefusals(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, time.Minute)
	rt, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	startAgent(t, st, nodes.Config{ID: "egress-local"}, rt)
	for _, tc := range []struct {
		eg   commands.Egress
		net  bool
		want errcode.Code
	}{
		{commands.Egress{Mode: "allow"}, false, errcode.InvalidRequest},
		{commands.Egress{Mode: "allow", Allow: []string{"*.com"}}, false, errcode.InvalidRequest},
		{commands.Egress{Mode: "allow", Allow: []string{"10.0.0.0/33"}}, false, errcode.InvalidRequest},
		{commands.Egress{Mode: "none", Allow: []string{"a.test"}}, false, errcode.InvalidRequest},
		{commands.Egress{Mode: "sometimes"}, false, errcode.InvalidRequest},
		{commands.Egress{Mode: "none"}, true, errcode.InvalidRequest},
		{commands.Egress{Mode: "open"}, false, errcode.PolicyDenied},
		{commands.Egress{Mode: "allow", Allow: []string{"pypi.org:443"}}, false, errcode.PolicyDenied},
	} {
		eg := tc.eg
		_, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local", Network: tc.net, Egress: &eg})
		if errcode.Of(err) != tc.want {
			t.Errorf("create with egress %+v (network %v): %v; want %s", tc.eg, tc.net, err, tc.want)
		}
	}
	if _, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local", Egress: &commands.Egress{Mode: "none"}}); err != nil {
		t.Errorf("create with egress none: %v", err)
	}
}

// TestDockerEgressRecordBudget: a sandbox that floods refused
// connections gets each one refused, but only its record budget's worth
// recorded; the next record counts the rest, so records plus the counts
// they carry account for the attempts.
func TestDockerEgressRecordBudget(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "egress-budget-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 2*time.Minute)
	startAgent(t, st, nodes.Config{ID: node, Egress: nodes.EgressConfig{RecordRate: 1, RecordBurst: 2}}, rt)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, Egress: &commands.Egress{Mode: "allow", Allow: []string{"a.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Client.Do(testenv.Context(t, time.Minute), s.SessionID, commands.OpDelete, nil, nil) }()
	attempts := 0
	try := func(n int) {
		t.Helper()
		script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do wget -q -O /dev/null http://denied.test/; i=$((i+1)); done; exit 0", n)
		if r, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"sh", "-c", script}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("the flood: %+v, %v", r, err)
		}
		attempts += n
	}
	try(20) // far past a burst of 2
	var recorded, counted int64
	testenv.Eventually(t, 30*time.Second, func() error {
		recorded, counted = 0, 0
		for _, e := range egressEvents(t, st, s.SessionID) {
			if e.finish == nil {
				return fmt.Errorf("a refusal's finish is not recorded yet") // appended after the sandbox is answered
			}
			if e.start.Allowed || e.finish.ErrorCode != string(errcode.PolicyDenied) {
				t.Fatalf("egress record %+v, finish %+v; want a refusal", e.start, e.finish)
			}
			recorded++
			counted += e.start.Unrecorded
		}
		if counted == 0 {
			try(1) // a token comes back each second: this one, or a later one, is recorded with the count
			return fmt.Errorf("%d records, none counts unrecorded refusals yet", recorded)
		}
		return nil
	})
	// The refusals after the last record are counted, not yet recorded:
	// records and counts make at most the attempts.
	if recorded >= int64(attempts)/2 || recorded+counted > int64(attempts) {
		t.Errorf("%d attempts: %d recorded, %d counted as unrecorded; want few records, and with their counts no more than the attempts", attempts, recorded, counted)
	}
}
