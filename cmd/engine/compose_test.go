package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/testenv"
)

// The compose deployment's tests run with CI=true or PADDOCK_COMPOSE=1:
// they need Docker, docker-compose (or the compose plugin) and the
// release images, and take minutes. PADDOCK_IMAGE_TAG names images
// scripts/release.sh --images built already (.ci/run does); without it
// the test builds them under a tag of its own and removes them after.

// composeEnabled skips the test unless CI=true or PADDOCK_COMPOSE=1.
func composeEnabled(t *testing.T) {
	t.Helper()
	if os.Getenv("CI") != "true" && os.Getenv("PADDOCK_COMPOSE") != "1" {
		t.Skip("the compose deployment runs with CI=true or PADDOCK_COMPOSE=1 (minutes, and the release images)")
	}
	testenv.DockerClient(t)
}

// releaseImages returns the tag of the paddock/engine, agent-node and
// supervisor images: PADDOCK_IMAGE_TAG's, or ones scripts/release.sh
// --images builds now (removed when the test ends).
func releaseImages(t *testing.T) string {
	t.Helper()
	root, err := moduleRootDir()
	if err != nil {
		t.Fatal(err)
	}
	if tag := os.Getenv("PADDOCK_IMAGE_TAG"); tag != "" {
		return tag
	}
	tag := fmt.Sprintf("test-%d", os.Getpid())
	t.Cleanup(func() {
		for _, img := range []string{"engine", "agent-node", "supervisor"} {
			_ = exec.Command("docker", "rmi", "paddock/"+img+":"+tag).Run() // absent when the build failed
		}
	})
	cmd := exec.Command("scripts/release.sh", "--images", "--version", tag, "--out", t.TempDir())
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, out)
	}
	return tag
}

// checkReleaseImages: the release images exist, are small, and each
// binary's --version names the commit the image's label says it was
// built from, which is this checkout's HEAD.
func checkReleaseImages(t *testing.T, tag string) {
	root, err := moduleRootDir()
	if err != nil {
		t.Fatal(err)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	for _, c := range []struct{ image, version, want string }{
		{"engine", "--version", "engine " + tag + " commit "},
		{"agent-node", "--version", "agent-node " + tag + " commit "},
		{"supervisor", "-version", "paddock-supervisor " + tag + " "},
	} {
		ref := "paddock/" + c.image + ":" + tag
		out, err := exec.Command("docker", "image", "inspect", "-f", `{{index .Config.Labels "org.opencontainers.image.revision"}} {{.Size}}`, ref).Output()
		if err != nil {
			t.Fatalf("docker image inspect %s: %v", ref, err)
		}
		var rev string
		var size int64
		if _, err := fmt.Sscan(string(out), &rev, &size); err != nil {
			t.Fatalf("%s: label and size %q: %v", ref, out, err)
		}
		if !strings.HasPrefix(rev, strings.TrimSpace(string(head))) {
			t.Errorf("%s was built from %s, want HEAD %s (stale images: scripts/release.sh --images)", ref, rev, head)
		}
		if size > 64<<20 {
			t.Errorf("%s is %d bytes, want a small FROM-scratch image (under 64 MiB)", ref, size)
		}
		v, err := exec.Command("docker", "run", "--rm", ref, c.version).CombinedOutput()
		if err != nil {
			t.Fatalf("docker run %s %s: %v\n%s", ref, c.version, err, v)
		}
		if !strings.HasPrefix(string(v), c.want) || !strings.Contains(string(v), rev) {
			t.Errorf("%s %s printed %q, want %q... naming commit %s", ref, c.version, v, c.want, rev)
		}
	}
}

// compose is one deployment of deploy/compose.yaml under a project name
// of the test's.
type compose struct {
	t       *testing.T
	root    string
	dir     string
	project string
	prefix  string
	argv    []string
}

// run runs docker-compose with the deployment's env file, file and
// project, and returns its combined output.
func (c *compose) run(args ...string) (string, error) {
	argv := append(append([]string{}, c.argv...), "--env-file", filepath.Join(c.dir, "compose.env"),
		"-f", filepath.Join(c.root, "deploy", "compose.yaml"), "-p", c.project)
	cmd := exec.Command(argv[0], append(argv[1:], args...)...)
	cmd.Dir = c.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", strings.Join(argv, " "), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// leftovers lists what of the deployment is still on Docker: its
// containers, networks and volumes (by compose's project label) and its
// nodes' sandboxes (by paddock.node).
func (c *compose) leftovers() []string {
	var left []string
	project := "label=com.docker.compose.project=" + c.project
	for _, q := range [][]string{
		{"ps", "-aq", "--filter", project},
		{"network", "ls", "-q", "--filter", project},
		{"volume", "ls", "-q", "--filter", project},
		{"ps", "-aq", "--filter", "label=paddock.node=" + c.prefix + "-1"},
		{"ps", "-aq", "--filter", "label=paddock.node=" + c.prefix + "-2"},
		{"volume", "ls", "-q", "--filter", "label=paddock.node=" + c.prefix + "-1"},
		{"volume", "ls", "-q", "--filter", "label=paddock.node=" + c.prefix + "-2"},
	} {
		out, err := exec.Command("docker", q...).Output()
		if err != nil {
			left = append(left, fmt.Sprintf("docker %s: %v", strings.Join(q, " "), err))
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			left = append(left, q[0]+" "+id)
		}
	}
	return left
}

// down takes the deployment down with its volumes, then removes its
// nodes' sandboxes, as deploy/README.md says.
func (c *compose) down() error {
	_, err := c.run("down", "-v", "--remove-orphans", "--timeout", "20")
	cmd := exec.Command(filepath.Join(c.root, "deploy", "compose-setup.sh"), "--remove-sandboxes", c.dir)
	if out, rerr := cmd.CombinedOutput(); rerr != nil {
		err = fmt.Errorf("%w; compose-setup.sh --remove-sandboxes: %v\n%s", err, rerr, out)
	}
	return err
}

// composeCommand is docker-compose (Debian's 1.29) when on PATH, else the
// compose plugin.
func composeCommand(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	t.Fatal("neither docker-compose nor the compose plugin is installed (Debian: apt-get install docker-compose)")
	return nil
}

// TestCompose checks the release images (checkReleaseImages), then brings
// deploy/compose.yaml up from them (three
// NATS servers with route authorization and TLS, an engine, two nodes on
// the host's Docker), runs the README's tour against it through the CLI,
// kills one NATS server and the node of a persisted session, and checks
// that every acknowledged event is still there, the session comes back on
// the other node (--auto-resume lost) with its workspace, and the audit
// trail verifies; then down -v leaves no container, network, volume or
// sandbox behind.
func TestCompose(t *testing.T) {
	composeEnabled(t)
	tag := releaseImages(t)
	t.Run("images", func(t *testing.T) { checkReleaseImages(t, tag) })
	root, err := moduleRootDir()
	if err != nil {
		t.Fatal(err)
	}
	c := &compose{t: t, root: root, dir: t.TempDir(), project: fmt.Sprintf("paddockct%d", os.Getpid()),
		prefix: fmt.Sprintf("ct%d", os.Getpid()), argv: composeCommand(t)}
	port := testenv.FreePortRange(t, 3)
	setup := exec.Command(filepath.Join(root, "deploy", "compose-setup.sh"), "--tag", tag, "--prefix", c.prefix,
		"--port", fmt.Sprint(port), c.dir)
	out, err := setup.Output()
	if err != nil {
		t.Fatalf("compose-setup.sh: %v\n%s%s", err, out, exitStderr(err))
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	url := env["PADDOCK_URL"]
	if url == "" || env["PADDOCK_CREDS"] == "" || env["PADDOCK_TLS_CA"] == "" {
		t.Fatalf("compose-setup.sh printed %q, want PADDOCK_URL, PADDOCK_CREDS and PADDOCK_TLS_CA", out)
	}
	t.Setenv("PADDOCK_CREDS", env["PADDOCK_CREDS"])
	t.Setenv("PADDOCK_TLS_CA", env["PADDOCK_TLS_CA"])
	t.Setenv("PADDOCK_TENANT", "")
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := c.run("logs", "--no-color", "--tail", "40")
			t.Logf("the deployment's logs:\n%s", logs)
		}
		if err := c.down(); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	if _, err := c.run("up", "-d"); err != nil {
		t.Fatal(err)
	}
	// CI's busy machine has taken over a minute to elect the servers'
	// JetStream leaders and start both nodes: the wait gets the whole of
	// its own --timeout, not cli's minute.
	if code, _, errs := cliWithin(t, 4*time.Minute, url, "", "cluster", "wait", "--replicas", "3", "--nodes", "2", "--timeout", "3m"); code != 0 {
		t.Fatalf("cluster wait: exit %d, stderr %q", code, errs)
	}

	tour(t, url)

	// Two persisted sessions (placement takes the less loaded node, so
	// one per node as a rule), each with a file; their events as
	// acknowledged. The node of the first one is killed, with nats-1.
	type session struct{ id, node, events string }
	var ss []*session
	for i := range 2 {
		id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
		mustCLI(t, url, fmt.Sprintf("work %d\n", i), "sandbox", "write", id, "work.txt")
		mustCLI(t, url, "", "sandbox", "persist", id)
		ss = append(ss, &session{id: id, node: inspectCompose(t, url, id).Node})
	}
	for _, s := range ss {
		s.events = mustCLI(t, url, "", "events", "tail", "--session", s.id, "--no-follow", "--json")
	}
	victim, survivor := ss[0].node, c.prefix+"-1"
	if victim == survivor {
		survivor = c.prefix + "-2"
	}
	victimSvc := "node-" + strings.TrimPrefix(victim, c.prefix+"-")
	for _, svc := range []string{"nats-1", victimSvc} {
		if _, err := c.run("kill", svc); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("killed nats-1 and %s (node %s; sessions %s on %s, %s on %s)", victimSvc, victim, ss[0].id, ss[0].node, ss[1].id, ss[1].node)

	// The lost sessions come back on the other node with their workspace;
	// the other one is where it was.
	for _, s := range ss {
		testenv.Eventually(t, 3*time.Minute, func() error {
			code, out, errs := cli(t, url, "", "sandbox", "inspect", s.id, "--json")
			if code != 0 {
				return fmt.Errorf("sandbox inspect: exit %d: %s", code, errs)
			}
			var r composeSession
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				return fmt.Errorf("sandbox inspect --json: %w", err)
			}
			if r.Status != "running" || r.Node != survivor {
				return fmt.Errorf("session %s (was on %s) is %s on %s, want running on %s", s.id, s.node, r.Status, r.Node, survivor)
			}
			return nil
		})
	}
	for i, s := range ss {
		if got := mustCLI(t, url, "", "sandbox", "read", s.id, "work.txt"); got != fmt.Sprintf("work %d\n", i) {
			t.Errorf("session %s: work.txt = %q after the kills, want %q", s.id, got, fmt.Sprintf("work %d\n", i))
		}
		after := mustCLI(t, url, "", "events", "tail", "--session", s.id, "--no-follow", "--json")
		if !strings.HasPrefix(after, s.events) {
			t.Errorf("session %s: the events acknowledged before the kills are not all there, in order:\nbefore:\n%s\nafter:\n%s", s.id, s.events, after)
		}
	}
	if out := mustCLI(t, url, "", "sandbox", "exec", ss[0].id, "--", "cat", "work.txt"); out != "work 0\n" {
		t.Errorf("exec in the resumed session printed %q, want work 0", out)
	}
	if code, out, errs := cli(t, url, "", "audit", "verify"); code != 0 {
		t.Errorf("audit verify after the kills: exit %d\n%s%s", code, out, errs)
	}
	for _, s := range ss {
		mustCLI(t, url, "", "sandbox", "delete", s.id)
	}

	if err := c.down(); err != nil {
		t.Fatal(err)
	}
	if left := c.leftovers(); len(left) > 0 {
		t.Errorf("down -v left behind: %v", left)
	}
}

// composeSession is what TestCompose reads of `sandbox inspect --json`.
type composeSession struct {
	Status string `json:"status"`
	Node   string `json:"node"`
}

func inspectCompose(t *testing.T, url, id string) composeSession {
	t.Helper()
	var r composeSession
	out := mustCLI(t, url, "", "sandbox", "inspect", id, "--json")
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("sandbox inspect --json: %v\n%s", err, out)
	}
	return r
}

// exitStderr is the stderr an *exec.ExitError kept, if any.
func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
