package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/provision"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

// readmeBlock returns the first sh block after heading in the module's
// file doc (README.md, deploy/README.md).
func readmeBlock(t *testing.T, doc, heading string) string {
	t.Helper()
	root, err := moduleRootDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", doc, heading)
	}
	_, rest, ok = strings.Cut(rest, "\n```sh\n")
	block, _, ok2 := strings.Cut(rest, "\n```\n")
	if !ok || !ok2 {
		t.Fatalf("%s has no sh block under %q", doc, heading)
	}
	return block + "\n"
}

// TestReadmeCluster runs the README's "Run it on a cluster" block with
// bash, as pasted, with two changes: the binaries are the test's builds
// (instead of its first line's go build), and the ports are free ones
// (instead of 4222 and 6222). The deployment it starts must show, in
// `engine status --json`, three servers, every Paddock stream at three
// replicas with a leader and current followers, and the node; each of its
// processes must then stop cleanly on SIGTERM.
func TestReadmeCluster(t *testing.T) {
	runClusterBlock(t, "README.md", "## Run it on a cluster", "host-1")
}

// TestDeployReadme runs deploy/README.md's fleet on one host (three
// servers, an engine and two nodes) the same way.
func TestDeployReadme(t *testing.T) {
	runClusterBlock(t, "deploy/README.md", "## A small fleet on one host", "host-1", "host-2")
}

// runClusterBlock runs the sh block under heading in doc, a deployment of
// three servers, an engine and the nodes named, and checks its status and
// that each process stops cleanly, as TestReadmeCluster says.
func runClusterBlock(t *testing.T, doc, heading string, nodeIDs ...string) {
	block := readmeBlock(t, doc, heading)
	build, script, _ := strings.Cut(block, "\n")
	if !strings.HasPrefix(build, "go build -o bin/ ./cmd/engine ./cmd/agent-node") {
		t.Fatalf("the block's first line is %q, want the go build of both binaries", build)
	}
	const ports = "--client-port 4222 --route-port 6222"
	if strings.Count(script, ports) != 1 {
		t.Fatalf("the block does not name %q once:\n%s", ports, script)
	}
	base := testenv.FreePortRange(t, 6)
	script = strings.Replace(script, ports, fmt.Sprintf("--client-port %d --route-port %d", base, base+3), 1)
	// Then: the status as JSON, the background jobs' pids, and a wait for
	// each (last started first), recording its exit code.
	script = "set -e\n" + script + `
engine status --json > "$TMPDIR/status.json"
jobs -p > "$TMPDIR/pids.tmp" && mv "$TMPDIR/pids.tmp" "$TMPDIR/pids"
for p in $(jobs -p | tac); do
  code=0; wait $p || code=$?
  echo "$p $code" >> "$TMPDIR/exits"
done
`
	bins := filepath.Dir(testenv.BuildBinary(t, "./cmd/engine"))
	if err := os.Rename(testenv.BuildBinary(t, "./cmd/agent-node"), filepath.Join(bins, "agent-node")); err != nil {
		t.Fatal(err)
	}
	tmp, home := t.TempDir(), t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "PADDOCK_") && k != "TMPDIR" && k != "HOME" && k != "PATH" {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bins+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+tmp, "HOME="+home)
	logs, err := os.Create(filepath.Join(t.TempDir(), "script.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd := exec.Command("bash", "-c", script)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed once bash is reaped; waitErr is then its status.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }() // the test waits for it below or in the cleanup
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever is left of the group
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("the README's script did not end after SIGKILL")
		}
	})
	scriptLog := func() string { b, _ := os.ReadFile(logs.Name()); return string(b) }
	pidsFile := filepath.Join(tmp, "pids")
	testenv.Eventually(t, 3*time.Minute, func() error {
		select {
		case <-exited:
			t.Fatalf("the README's block failed: %v\n%s%s", waitErr, scriptLog(), deploymentLogs(tmp))
		default:
		}
		if _, err := os.Stat(pidsFile); err != nil {
			return fmt.Errorf("the block has not finished")
		}
		return nil
	})
	t.Logf("the README's block:\n%s", scriptLog())
	if !strings.Contains(scriptLog(), "SBX_EVENTS") || !strings.Contains(scriptLog(), "host-1") {
		t.Errorf("engine status printed no SBX_EVENTS or host-1")
	}

	b, err := os.ReadFile(filepath.Join(tmp, "status.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep operator.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("engine status --json: %v\n%s", err, b)
	}
	if rep.Cluster != "paddock" || len(rep.Servers) != 3 {
		t.Errorf("status: cluster %q, servers %+v; want paddock with 3 servers", rep.Cluster, rep.Servers)
	}
	if len(rep.Streams) != len(provision.Streams()) {
		t.Errorf("status: %d streams, want %d", len(rep.Streams), len(provision.Streams()))
	}
	// --max-store bounds each server's store and the PADDOCK account's, so
	// the engine splits it as an embedded one does: the events stream
	// reserves its share, and every stream has a limit.
	const store = "--max-store 16g"
	if strings.Count(script, store) != 1 {
		t.Fatalf("the block does not name %q once:\n%s", store, script)
	}
	want := storage.Defaults(16 << 30)
	for _, s := range rep.Streams {
		if err := s.Healthy(3); err != nil {
			t.Errorf("status: %v", err)
		}
		if s.MaxBytes <= 0 {
			t.Errorf("status: stream %s has no limit; want the engine's split of --max-store", s.Name)
		}
		if s.Name == events.DefaultStream && s.MaxBytes != want.Events {
			t.Errorf("status: %s reserves %d bytes, want %d (%d%% of 16g)", s.Name, s.MaxBytes, want.Events, storage.EventsPercent)
		}
	}
	var up []string
	for _, n := range rep.Nodes {
		if n.Status == "up" {
			up = append(up, n.Node)
		}
	}
	if strings.Join(up, ",") != strings.Join(nodeIDs, ",") {
		t.Errorf("status: nodes %+v; want %v up", rep.Nodes, nodeIDs)
	}

	// Stop: the node and the engine first, then the servers; each exits 0.
	pb, err := os.ReadFile(pidsFile)
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(string(pb))
	if len(pids) != 4+len(nodeIDs) {
		t.Fatalf("background jobs %v, want 3 servers, an engine and %d nodes", pids, len(nodeIDs))
	}
	exits := filepath.Join(tmp, "exits")
	for i, group := range [][]string{pids[3:], pids[:3]} {
		for _, p := range group {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				t.Fatalf("SIGTERM %d: %v", pid, err)
			}
		}
		want := len(pids) - 3 + 3*i
		testenv.Eventually(t, 90*time.Second, func() error {
			b, _ := os.ReadFile(exits)
			if n := strings.Count(string(b), "\n"); n < want {
				return fmt.Errorf("%d of %d processes exited", n, want)
			}
			return nil
		})
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("the script: %v", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the script did not end after its processes")
	}
	b, _ = os.ReadFile(exits)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasSuffix(line, " 0") {
			t.Errorf("a process did not exit 0 on SIGTERM (pid, exit code): %s", line)
		}
	}
}

// deploymentLogs is the tail of each log a README block's deployment
// wrote under dir ($D/*.log, $D being a mktemp -d in TMPDIR=dir).
func deploymentLogs(dir string) string {
	paths, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	var b strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s:\n%s", filepath.Base(p), tail(string(data), 30))
	}
	return b.String()
}
