package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/testenv"
)

var (
	clientCredsRE = regexp.MustCompile(`client_default=(\S+)`)
	summary       = regexp.MustCompile(`(?m)^(\d+) passed(.*) in `)
)

// TestPythonProvider runs the OpenAI Agents SDK's own sandbox tests
// (tests/sandbox/test_run_cwd.py and test_exposed_ports.py, its
// UnixLocalSandboxClient rebound by python/paddock_agents' pytest plugin to
// PaddockSandboxClient itself, which the tests construct with no
// arguments: it reads PADDOCK_URL, PADDOCK_CREDS and PADDOCK_IMAGE) and the
// package's own tests (python/paddock_agents/tests) against a real `engine
// serve` on Docker with the Python sandbox image, auth on, through a client
// credential. Without python3, the pysdk folder, Docker or the image it
// skips, unless CI=true.
func TestPythonProvider(t *testing.T) {
	py := startPythonEngine(t, "pysdk")
	pytest := func(t *testing.T, dir string, args ...string) string {
		t.Helper()
		return runPytest(t, py.python, dir, py.env, args...)
	}

	t.Run("SDK test_run_cwd", func(t *testing.T) {
		out := pytest(t, filepath.Join(py.pysdk, "openai-agents"), "-p", "paddock_agents.pytest_plugin", "tests/sandbox/test_run_cwd.py")
		m := summary.FindStringSubmatch(out)
		if m == nil || m[1] != "5" || strings.Contains(m[2], "skipped") || strings.Contains(m[2], "failed") {
			t.Fatalf("the SDK's test_run_cwd.py on Paddock: want 5 passed, nothing skipped; got:\n%s", out)
		}
		t.Logf("the SDK's test_run_cwd.py on Paddock: %s", m[0])
	})
	t.Run("SDK test_exposed_ports", func(t *testing.T) {
		// One test is left out: it asserts the endpoint is 127.0.0.1:<the
		// sandbox port>, the local provider's identity mapping; Paddock's
		// node forwards from a port of its own (nodes/port.go). Its other
		// assertion (duplicate ports kept once) is paddock_agents'
		// test_duplicate_exposed_ports_are_sent_once.
		out := pytest(t, filepath.Join(py.pysdk, "openai-agents"), "-p", "paddock_agents.pytest_plugin", "tests/sandbox/test_exposed_ports.py",
			"--deselect", "tests/sandbox/test_exposed_ports.py::test_unix_local_resolve_exposed_port_uses_wrapper_and_normalizes_state")
		m := summary.FindStringSubmatch(out)
		if m == nil || m[1] != "5" || strings.Contains(m[2], "skipped") || strings.Contains(m[2], "failed") {
			t.Fatalf("the SDK's test_exposed_ports.py on Paddock: want 5 passed, nothing skipped; got:\n%s", out)
		}
		t.Logf("the SDK's test_exposed_ports.py on Paddock: %s", m[0])
	})
	t.Run("paddock_agents", func(t *testing.T) {
		out := pytest(t, filepath.Join(py.root, "python", "paddock_agents"), "tests", "--ignore=tests/test_node_loss.py") // TestPythonProviderNodeLoss runs it
		m := summary.FindStringSubmatch(out)
		if m == nil || m[1] != "19" || strings.Contains(m[2], "skipped") || strings.Contains(m[2], "failed") {
			t.Fatalf("python/paddock_agents/tests: want 19 passed, nothing skipped; got:\n%s", out)
		}
		t.Logf("python/paddock_agents/tests: %s", m[0])
	})
}

// TestPythonClient runs the plain Python client's tests
// (python/paddock/tests, its README's tour included) against a real
// `engine serve` on Docker with the Python sandbox image, auth on, through
// a client credential (and the admin's, for the events stream). Without
// python3, the pysdk folder, Docker or the image it skips, unless CI=true.
func TestPythonClient(t *testing.T) {
	py := startPythonEngine(t, "pyclient")
	out := runPytest(t, py.python, filepath.Join(py.root, "python", "paddock"), py.env, "tests")
	m := summary.FindStringSubmatch(out)
	if m == nil || m[1] != "20" || strings.Contains(m[2], "skipped") || strings.Contains(m[2], "failed") {
		t.Fatalf("python/paddock/tests: want 20 passed, nothing skipped; got:\n%s", out)
	}
	t.Logf("python/paddock/tests: %s", m[0])
}

// pythonEngine is an `engine serve` for the Python suites and the
// environment they run in.
type pythonEngine struct {
	python, pysdk, root string
	env                 []string
}

// startPythonEngine starts `engine serve` on Docker with the Python image
// (node id prefix-<nanos>) and returns the environment of the Python
// suites: PYTHONPATH (the SDK, python/paddock, python/paddock_agents),
// PADDOCK_URL, PADDOCK_CREDS (a client credential), PADDOCK_ADMIN_CREDS,
// PADDOCK_IMAGE, PADDOCK_RUNTIME, PADDOCK_ENGINE. Every container the
// suite made must be gone when the test ends (the tests delete their
// sessions); a leftover is a failure, removed all the same.
func startPythonEngine(t *testing.T, prefix string) pythonEngine {
	t.Helper()
	python, pysdk, image, cli, root := pythonSetup(t)
	engine := testenv.BuildBinary(t, "./cmd/engine")
	state := t.TempDir()
	node := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	logs, _ := serveStoppable(t, "--state-dir", state, "--listen", "127.0.0.1:0", "--node-id", node,
		"--runtime", "docker", "--allow-image", image)
	url := readyRE.FindStringSubmatch(logs.String())
	admin := adminCredsRE.FindStringSubmatch(logs.String())
	creds := clientCredsRE.FindStringSubmatch(logs.String())
	if url == nil || admin == nil || creds == nil {
		t.Fatalf("no URL or credentials in the log:\n%s", logs.String())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		left, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "paddock.node="+node))})
		if err != nil {
			t.Errorf("list containers: %v", err)
			return
		}
		for _, c := range left {
			t.Errorf("container %s (%v) left behind by the Python suite", c.ID[:12], c.Names)
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	})

	env := append(os.Environ(),
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH="+pythonPath(pysdk, root),
		"PADDOCK_URL="+url[1],
		"PADDOCK_CREDS="+creds[1],
		"PADDOCK_ADMIN_CREDS="+admin[1],
		"PADDOCK_IMAGE="+image,
		"PADDOCK_RUNTIME=docker",
		"PADDOCK_ENGINE="+engine,
	)
	return pythonEngine{python: python, pysdk: pysdk, root: root, env: env}
}

// pythonPath is the PYTHONPATH of the Python suites: the SDK and its
// dependencies, the client (python/paddock) and the provider.
func pythonPath(pysdk, root string) string {
	return strings.Join([]string{filepath.Join(pysdk, "site"), filepath.Join(pysdk, "openai-agents", "src"),
		filepath.Join(root, "python", "paddock"), filepath.Join(root, "python", "paddock_agents")}, string(os.PathListSeparator))
}

// runPytest runs python -m pytest args in dir with env and returns its
// output; a non-zero exit fails the test with that output.
func runPytest(t *testing.T, python, dir string, env []string, args ...string) string {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Minute)
	cmd := exec.CommandContext(ctx, python, append([]string{"-m", "pytest", "-p", "pytest_asyncio.plugin", "-p", "no:cacheprovider", "-q", "-rs"}, args...)...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("pytest %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out.String())
	}
	return out.String()
}

// TestPythonProviderNodeLoss: a session left by one fleet process on node
// A, whose agent is then killed, is resumed by another process from its
// serialised state: its subject has no responder, so the provider asks the
// engine's scheduler, which re-creates it on node B from its snapshot
// (python/paddock_agents/tests/test_node_loss.py, in two steps).
func TestPythonProviderNodeLoss(t *testing.T) {
	python, pysdk, image, cli, root := pythonSetup(t)
	agentNode := testenv.BuildBinary(t, "./cmd/agent-node")
	state := t.TempDir()
	suffix := fmt.Sprint(time.Now().UnixNano())
	nodeA, nodeB := "pyloss-a-"+suffix, "pyloss-b-"+suffix
	logs, _ := serveStoppable(t, "--state-dir", state, "--listen", "127.0.0.1:0", "--no-local-node")
	url, creds := readyRE.FindStringSubmatch(logs.String()), clientCredsRE.FindStringSubmatch(logs.String())
	if url == nil || creds == nil {
		t.Fatalf("no URL or credentials in the log:\n%s", logs.String())
	}
	nodeCreds := map[string]string{}
	for _, id := range []string{nodeA, nodeB} {
		nodeCreds[id] = strings.TrimSpace(mustCLI(t, url[1], "", "auth", "add", "node", id, "--auth-dir", filepath.Join(state, "auth")))
		// The server takes new identities in on a reload: wait until it accepts this one.
		testenv.Eventually(t, 30*time.Second, func() error {
			nc, _, err := client.Connect(client.ConnectOptions{URL: url[1], Creds: nodeCreds[id]})
			if err != nil {
				return err
			}
			nc.Close()
			return nil
		})
	}
	// Each node's sandbox disks, checked for leftovers at the end (after
	// the cleanup below).
	diskDirs := map[string]string{nodeA: testenv.DiskDir(t), nodeB: testenv.DiskDir(t)}
	t.Cleanup(func() { // node A's container outlives its agent: remove it (and any other), with its disk
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, n := range []string{nodeA, nodeB} {
			rt, err := docker.New(docker.Config{Client: cli, Node: n, DiskDir: diskDirs[n]})
			if err != nil {
				t.Error(err)
				continue
			}
			found, err := rt.FindSandboxes(ctx)
			if err != nil {
				t.Errorf("find node %s's sandboxes: %v", n, err)
			}
			for _, fd := range found {
				if n == nodeB {
					t.Errorf("sandbox %s left behind on node B", fd.SessionID)
				}
				if err := fd.Sandbox.Shutdown(ctx); err != nil {
					t.Errorf("remove node %s's sandbox: %v", n, err)
				}
			}
			_ = rt.Close()
		}
		for _, n := range []string{nodeA, nodeB} {
			left, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "paddock.node="+n))})
			if err != nil {
				t.Errorf("list containers: %v", err)
				continue
			}
			for _, c := range left {
				if n == nodeB {
					t.Errorf("container %s left behind on node B", c.ID[:12])
				}
				_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			}
		}
	})
	nodeLogs := map[string]*testenv.SyncBuffer{}
	t.Cleanup(func() { // what the engine and the nodes said, when a step failed
		if t.Failed() {
			t.Logf("engine log:\n%s", tail(logs.String(), 60))
			for _, id := range []string{nodeA, nodeB} {
				if l := nodeLogs[id]; l != nil {
					t.Logf("node %s log:\n%s", id, tail(l.String(), 40))
				}
			}
		}
	})
	startNode := func(id string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command(agentNode, "--nats-url", url[1], "--creds", nodeCreds[id], "--id", id, "--runtime", "docker", "--allow-image", image, "--disk-dir", diskDirs[id])
		nlogs := &testenv.SyncBuffer{}
		nodeLogs[id] = nlogs
		cmd.Stdout, cmd.Stderr = nlogs, nlogs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }() // reaps it; the cleanup waits
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-waited })
		testenv.Eventually(t, 30*time.Second, func() error {
			if !strings.Contains(nlogs.String(), "node agent started") {
				return fmt.Errorf("node %s not started:\n%s", id, nlogs.String())
			}
			return nil
		})
		return cmd
	}
	pkg := filepath.Join(root, "python", "paddock_agents")
	stateFile := filepath.Join(t.TempDir(), "session-state.json")
	env := append(os.Environ(),
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH="+pythonPath(pysdk, root),
		"PADDOCK_URL="+url[1], "PADDOCK_CREDS="+creds[1], "PADDOCK_IMAGE="+image, "PADDOCK_RUNTIME=docker",
		"PADDOCK_NODE_LOSS_STATE="+stateFile,
	)
	step := func(name string) {
		t.Helper()
		// Short tracebacks: the error's code and message, not pages of frames.
		out := runPytest(t, python, pkg, append(env, "PADDOCK_NODE_LOSS_STEP="+name), "--tb=short", "tests/test_node_loss.py")
		if m := summary.FindStringSubmatch(out); m == nil || m[1] != "1" {
			t.Fatalf("node-loss step %s: want 1 passed; got:\n%s", name, out)
		}
	}

	a := startNode(nodeA)
	step("leave") // the session is on A: the only node
	var left struct {
		Node string `json:"node"`
	}
	if b, err := os.ReadFile(stateFile); err != nil || json.Unmarshal(b, &left) != nil || left.Node != nodeA {
		t.Fatalf("the left session's state = %s (%v); want it on %s", b, err, nodeA)
	}
	startNode(nodeB)
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	step("resume") // asserts it came back on another node with its files
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// pythonSetup is what the Python provider's tests need: python3 and the
// SDK (pythonSDK), the sandbox images, a Docker client and the module's
// root. It skips under -short: the suites take a minute or two.
func pythonSetup(t *testing.T) (python, pysdk, image string, cli *dockerclient.Client, root string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the Python provider suites take a minute or two")
	}
	python, pysdk = pythonSDK(t)
	testenv.SandboxBaseImage(t)
	image = testenv.PythonSandboxImage(t)
	cli = testenv.DockerClient(t)
	root, err := moduleRootDir()
	if err != nil {
		t.Fatal(err)
	}
	return python, pysdk, image, cli, root
}

// pythonTLSCheck connects the Python client over TLS with the CA, then
// without it: argv is the URL, the credentials and the CA.
const pythonTLSCheck = `
import asyncio, sys
import paddock

async def main() -> None:
    url, creds, ca = sys.argv[1:4]
    async with await paddock.connect(url=url, creds=creds, tls_ca=ca) as c:
        try:
            await c.lookup("no-such-session")
        except paddock.errors.SessionNotFound:
            pass
        else:
            sys.exit("a lookup of a missing session answered")
    try:
        await paddock.connect(url=url, creds=creds)
    except paddock.errors.Unavailable:
        print("refused without the CA")
    else:
        sys.exit("connected without the CA")

asyncio.run(main())
`

// TestPythonClientTLS: the Python client trusts an engine serving TLS with
// the CA it is given (tls_ca, as PADDOCK_TLS_CA) and cannot connect
// without it.
func TestPythonClientTLS(t *testing.T) {
	python, pysdk := pythonSDK(t)
	root, err := moduleRootDir()
	if err != nil {
		t.Fatal(err)
	}
	cert, key := selfSigned(t)
	dir := t.TempDir()
	url, _ := serveFor(t, "--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local",
		"--tls-cert", cert, "--tls-key", key)
	ctx := testenv.Context(t, 2*time.Minute)
	cmd := exec.CommandContext(ctx, python, "-c", pythonTLSCheck, url, filepath.Join(dir, "auth", "creds", "client-default.creds"), cert)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+pythonPath(pysdk, root))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused without the CA") {
		t.Fatalf("the Python client over TLS: %v\n%s", err, out)
	}
}
