package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/auth"
)

// A Fleet is a Paddock deployment of separate processes on 127.0.0.1, as
// an operator runs one on a cluster: N `engine nats-server` processes from
// the configs `engine cluster config` wrote (JetStream on disk in the
// test's directory, sync_interval: always, auth from the fleet's store),
// `engine serve --nats-url ... --replicas N --no-local-node` processes,
// and `agent-node` processes on the local runtime. Every process can be
// killed with SIGKILL and started again on the same ports, directories
// and ids, which is what a fault test needs:
//
//	f := testenv.StartFleet(t, testenv.FleetOptions{Engines: 2})
//	f.Servers[0].Kill(t)
//	f.Servers[0].Start(t)
//	f.WaitHealthy(t, time.Minute)
//
// Everything stops when the test ends.
type Fleet struct {
	// Dir holds the fleet's files: auth/, conf/, jetstream/, one directory
	// per node and one log per process run (logs/<name>.<run>.log).
	Dir string
	// AuthDir is the auth store the servers were configured from.
	AuthDir string
	// URL is every server's client URL, comma separated.
	URL string
	// EngineBin and NodeBin are the binaries the processes run.
	EngineBin, NodeBin string
	// Servers, Engines and Nodes are the processes, in order: servers
	// paddock-1.., engines e1.., nodes n1...
	Servers, Engines, Nodes []*Proc
	opts                    FleetOptions
}

// FleetOptions shape a Fleet.
type FleetOptions struct {
	// Servers is the number of NATS servers (default 3); the streams get
	// as many replicas.
	Servers int
	// Engines is the number of `engine serve` processes (default 1).
	Engines int
	// Nodes is the number of agent-node processes (default 1).
	Nodes int
	// Clients are client identities to make before the servers are
	// configured, name → tenant (the servers then need no reload).
	Clients map[string]string
	// EngineArgs are more `engine serve` flags (--node-ttl, --auto-resume).
	EngineArgs []string
}

// StartFleet builds the binaries, configures and starts the fleet and
// waits until it is healthy (WaitHealthy).
func StartFleet(t testing.TB, opts FleetOptions) *Fleet {
	t.Helper()
	if opts.Servers == 0 {
		opts.Servers = 3
	}
	if opts.Engines == 0 {
		opts.Engines = 1
	}
	if opts.Nodes == 0 {
		opts.Nodes = 1
	}
	f := &Fleet{Dir: t.TempDir(), opts: opts,
		EngineBin: BuildBinary(t, "./cmd/engine"), NodeBin: BuildBinary(t, "./cmd/agent-node")}
	f.AuthDir = filepath.Join(f.Dir, "auth")
	if err := os.MkdirAll(filepath.Join(f.Dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	st := auth.Open(f.AuthDir)
	add := func(name string, role auth.Role, tenant string) {
		t.Helper()
		if _, err := st.Add(name, role, tenant); err != nil {
			t.Fatalf("auth add %s: %v", name, err)
		}
	}
	add("engine", auth.RoleEngine, "")
	add("admin", auth.RoleAdmin, "")
	for i := range opts.Nodes {
		add(fmt.Sprintf("n%d", i+1), auth.RoleNode, "")
	}
	for name, tenant := range opts.Clients {
		add(name, auth.RoleClient, tenant)
	}

	// One range for both: two separate picks could overlap.
	clientPort := FreePortRange(t, 2*opts.Servers)
	routePort := clientPort + opts.Servers
	conf := filepath.Join(f.Dir, "conf")
	out := f.run(t, "cluster", "config", "--servers", fmt.Sprint(opts.Servers), "--host", "127.0.0.1",
		"--client-port", fmt.Sprint(clientPort), "--route-port", fmt.Sprint(routePort),
		"--auth-dir", f.AuthDir, "--store-dir", filepath.Join(f.Dir, "jetstream"), "--max-store", "8g", "--out", conf)
	f.URL = strings.TrimSpace(out)
	t.Cleanup(func() {
		// Nodes first, servers last.
		for _, ps := range [][]*Proc{f.Nodes, f.Engines, f.Servers} {
			for _, p := range ps {
				p.Kill(t)
			}
		}
		UnmountOverlays(t, f.Dir)
		if t.Failed() {
			f.DumpLogs(t)
			f.keep(t)
		}
	})
	for i := range opts.Servers {
		name := fmt.Sprintf("paddock-%d", i+1)
		p := f.newProc(name, f.EngineBin, "nats-server", "-c", filepath.Join(conf, name+".conf"))
		f.Servers = append(f.Servers, p)
		p.Start(t)
	}
	f.wait(t, 60*time.Second, 0, 0)
	for i := range opts.Engines {
		name := fmt.Sprintf("e%d", i+1)
		// --node-id names the engine's projector; no local node runs.
		p := f.newProc(name, f.EngineBin, "serve", "--nats-url", f.URL, "--replicas", fmt.Sprint(opts.Servers),
			"--no-local-node", "--node-id", name, "--creds", f.Creds("engine"),
			"--state-dir", filepath.Join(f.Dir, name), "--sandbox-dir", filepath.Join(f.Dir, name+"-sandboxes"))
		p.args = append(p.args, opts.EngineArgs...)
		f.Engines = append(f.Engines, p)
		p.Start(t)
		p.WaitLog(t, engineReadyRE, 60*time.Second)
	}
	for i := range opts.Nodes {
		name := fmt.Sprintf("n%d", i+1)
		p := f.newProc(name, f.NodeBin, "--nats-url", f.URL, "--id", name, "--creds", f.Creds(name),
			"--runtime", "local", "--dir", filepath.Join(f.Dir, name))
		f.Nodes = append(f.Nodes, p)
		p.Start(t)
	}
	f.WaitHealthy(t, 90*time.Second)
	return f
}

var engineReadyRE = regexp.MustCompile(`paddock engine ready`)

// Creds is the credentials file of the identity name ("admin", "engine",
// a node's id, a client's name).
func (f *Fleet) Creds(name string) string { return auth.Open(f.AuthDir).CredsPath(name) }

// CLI runs the engine binary with args against the fleet as its admin, in
// a process, and returns the exit code and output. It fails the test only
// when the process cannot run or outlives timeout.
func (f *Fleet) CLI(t testing.TB, timeout time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.EngineBin, append([]string{"--server", f.URL, "--creds", f.Creds("admin")}, args...)...)
	cmd.Env = f.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("engine %s did not end within %s (a hang)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, out.String(), errb.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("engine %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}

// run is CLI without a server, failing the test on a non-zero exit.
func (f *Fleet) run(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(f.EngineBin, args...)
	cmd.Env = f.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("engine %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// env is the processes' environment: the test's, with HOME and the XDG
// directories in the fleet's directory, so that no default (the user's
// state dir, the admin credentials there) is ever found or written.
func (f *Fleet) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "PADDOCK_URL", "PADDOCK_CREDS", "PADDOCK_TENANT":
			continue
		}
		env = append(env, kv)
	}
	home := filepath.Join(f.Dir, "home")
	return append(env, "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"), "XDG_CACHE_HOME="+filepath.Join(home, "cache"))
}

// WaitHealthy waits up to d until every process runs, every server
// answers with JetStream, each Paddock stream has a replica on every
// server with a leader and current followers, every node answers
// (`engine cluster wait`), and every engine has logged that it is ready
// since it last started. It fails the test, with the processes' logs,
// when that does not happen in time.
func (f *Fleet) WaitHealthy(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, p := range f.Engines {
		p.WaitLog(t, engineReadyRE, time.Until(deadline))
	}
	f.wait(t, time.Until(deadline), f.opts.Servers, len(f.Nodes))
}

// wait runs `engine cluster wait` with replicas and nodes.
func (f *Fleet) wait(t testing.TB, d time.Duration, replicas, nodes int) {
	t.Helper()
	for _, ps := range [][]*Proc{f.Servers, f.Engines, f.Nodes} {
		for _, p := range ps {
			if !p.Running() {
				f.DumpLogs(t)
				t.Fatalf("%s is not running", p.Name)
			}
		}
	}
	d = max(d, time.Second)
	code, out, errs := f.CLI(t, d+30*time.Second, "cluster", "wait", "--replicas", fmt.Sprint(replicas), "--nodes", fmt.Sprint(nodes), "--timeout", d.String())
	if code != 0 {
		f.DumpLogs(t)
		t.Fatalf("the fleet is not healthy within %s: exit %d\n%s%s", d, code, out, errs)
	}
}

// Server returns the server process of the given server name (as stream
// leaders are named), or nil.
func (f *Fleet) Server(name string) *Proc {
	for _, p := range f.Servers {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// DumpLogs logs the end of every process's current log.
func (f *Fleet) DumpLogs(t testing.TB) {
	t.Helper()
	for _, ps := range [][]*Proc{f.Servers, f.Engines, f.Nodes} {
		for _, p := range ps {
			lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
			t.Logf("--- %s (run %d), last lines of %s:\n%s", p.Name, p.Runs(), p.logPath(p.Runs()), strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	}
}

// keep copies the fleet's directory (logs, configs, JetStream's files,
// the test's credentials) to the directory $PADDOCK_FLEET_KEEP names, if
// any, as the evidence of a failure.
func (f *Fleet) keep(t testing.TB) {
	dst := os.Getenv("PADDOCK_FLEET_KEEP")
	if dst == "" {
		t.Logf("set PADDOCK_FLEET_KEEP=DIR to keep the fleet's files after a failure")
		return
	}
	dst = filepath.Join(dst, fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Unix()))
	if err := os.CopyFS(dst, os.DirFS(f.Dir)); err != nil {
		t.Logf("keep the fleet's files: %v", err)
		return
	}
	t.Logf("the fleet's files are in %s", dst)
}

func (f *Fleet) newProc(name, bin string, args ...string) *Proc {
	return &Proc{Name: name, bin: bin, args: args, env: f.env(), logDir: filepath.Join(f.Dir, "logs")}
}

// NewProc returns a process that runs bin with args, not started yet,
// logging to the test's temporary directory. It is killed, if still
// running, when the test ends.
func NewProc(t testing.TB, name, bin string, args ...string) *Proc {
	p := &Proc{Name: name, bin: bin, args: args, env: os.Environ(), logDir: t.TempDir()}
	t.Cleanup(func() { p.Kill(t) })
	return p
}

// A Proc is one process of a Fleet: started from fixed arguments, killed
// with SIGKILL (Kill) or stopped with SIGTERM (Stop), and started again
// on the same arguments (Start). Each run logs (stdout and stderr) to its
// own file, logs/<name>.<run>.log. Its methods are for the test's
// goroutine.
type Proc struct {
	// Name is the process's name in the fleet (a server's name, an
	// engine's or a node's id).
	Name   string
	bin    string
	args   []string
	env    []string
	logDir string

	mu   sync.Mutex // guards the fields below
	cmd  *exec.Cmd
	runs int
	// done is closed when the current run has exited; exitErr is then
	// its exit status.
	done    chan struct{}
	exitErr error
}

// Start starts a new run of the process. It fails the test when the
// process is running or cannot start.
func (p *Proc) Start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			t.Fatalf("%s: started while running", p.Name)
		}
	}
	p.runs++
	logf, err := os.Create(p.logPath(p.runs))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr = cmd, done, nil
	go func() { // reaps this run; Kill, Stop and the fleet's cleanup wait for it
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
}

// Kill sends SIGKILL to the process and waits until it is gone; a
// process that is not running is left as it is.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	p.signal(t, syscall.SIGKILL, 30*time.Second)
}

// Stop sends SIGTERM and waits up to d for the process to exit, and
// returns its exit status (nil: exit code 0). It fails the test if the
// process outlives d.
func (p *Proc) Stop(t testing.TB, d time.Duration) error {
	t.Helper()
	p.signal(t, syscall.SIGTERM, d)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

func (p *Proc) signal(t testing.TB, sig syscall.Signal, d time.Duration) {
	t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not exit within %s of %v", p.Name, d, sig)
	}
}

// Signal sends sig to the running process and does not wait.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.New(p.Name + " was never started")
	}
	return p.cmd.Process.Signal(sig)
}

// Wait waits up to d for the current run to exit and returns its exit
// status (nil: exit code 0); it fails the test if the run outlives d.
func (p *Proc) Wait(t testing.TB, d time.Duration) error {
	t.Helper()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		t.Fatalf("%s was never started", p.Name)
	}
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s", p.Name, d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Running reports whether the current run has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Runs is how many times the process has been started.
func (p *Proc) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// Log returns what the current run has logged so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.logPath(p.Runs()))
	return string(b)
}

// WaitLog waits up to d until the current run's log matches re, and fails
// the test (with the log) if it does not, or if the run exits first.
func (p *Proc) WaitLog(t testing.TB, re *regexp.Regexp, d time.Duration) {
	t.Helper()
	Eventually(t, max(d, time.Second), func() error {
		if re.MatchString(p.Log()) {
			return nil
		}
		if !p.Running() {
			t.Fatalf("%s exited before logging %q:\n%s", p.Name, re, p.Log())
		}
		return fmt.Errorf("%s has not logged %q", p.Name, re)
	})
}

func (p *Proc) logPath(run int) string {
	return filepath.Join(p.logDir, fmt.Sprintf("%s.%d.log", p.Name, run))
}

// FreePortRange returns the first of n consecutive ports that were all
// free on 127.0.0.1 a moment ago (configs that count ports up from a base
// need them consecutive).
func FreePortRange(t testing.TB, n int) int {
	t.Helper()
	for range 100 {
		// Below Linux's ephemeral ports (32768..), which outgoing
		// connections take at any moment.
		base := 20000 + rand.IntN(12000-n)
		var ls []net.Listener
		for p := base; p < base+n; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if len(ls) == n {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports found", n)
	return 0
}
