// Package gvisorsetup registers gVisor's runsc with a Docker daemon, for
// the gvisor runtime (nodes/runtime/docker, Config.GVisor): it writes the
// runtime's entry into daemon.json, keeping every other key, sends dockerd
// SIGHUP (runtimes are reloadable; nothing else is touched) and waits
// until the daemon lists the runtime with its arguments. It is idempotent:
// an entry already right writes nothing and signals nothing.
package gvisorsetup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/client"

	"github.com/paddock-dev/paddock/nodes/runtime/docker"
)

// Defaults of Options.
const (
	DefaultDaemonJSON = "/etc/docker/daemon.json"
	DefaultPath       = "/usr/bin/runsc"
	DefaultPidFile    = "/var/run/docker.pid"
)

// Options says what to register where. Zero values take the defaults.
type Options struct {
	// DaemonJSON is the daemon's configuration file (DefaultDaemonJSON);
	// a missing one is created.
	DaemonJSON string
	// Name is the runtime's name in Docker (docker.GVisorOCIRuntime).
	Name string
	// Path is the runsc binary (DefaultPath); it must exist.
	Path string
	// Args are runsc's arguments (docker.GVisorRuntimeArgs).
	Args []string
	// Reload makes the daemon read the file again (default: SIGHUP to the
	// pid in DefaultPidFile).
	Reload func() error
	// Listed reports whether the daemon lists the runtime with its
	// arguments (default: the engine's info, from the environment).
	Listed func(ctx context.Context) (bool, error)
	// Wait bounds how long Register waits for Listed (default 30s).
	Wait time.Duration
}

func (o Options) withDefaults() Options {
	if o.DaemonJSON == "" {
		o.DaemonJSON = DefaultDaemonJSON
	}
	if o.Name == "" {
		o.Name = docker.GVisorOCIRuntime
	}
	if o.Path == "" {
		o.Path = DefaultPath
	}
	if o.Args == nil {
		o.Args = slices.Clone(docker.GVisorRuntimeArgs)
	}
	if o.Reload == nil {
		o.Reload = func() error { return SignalDaemon(DefaultPidFile) }
	}
	if o.Listed == nil {
		o.Listed = func(ctx context.Context) (bool, error) { return EngineLists(ctx, o.Name, o.Path, o.Args) }
	}
	if o.Wait == 0 {
		o.Wait = 30 * time.Second
	}
	return o
}

// Result says what Register did.
type Result struct {
	// Changed is true when the file was written and the daemon reloaded.
	Changed bool
	// File is the daemon configuration written (or found right).
	File string
}

// Register makes the daemon know runsc under opts.Name with opts.Args:
// it merges the entry into the daemon's configuration file (every other
// key and runtime kept), reloads the daemon when the file changed, and
// waits until the daemon lists it. A file that is not a JSON object is an
// error and is left alone.
func Register(ctx context.Context, opts Options) (Result, error) {
	opts = opts.withDefaults()
	res := Result{File: opts.DaemonJSON}
	if _, err := os.Stat(opts.Path); err != nil {
		return res, fmt.Errorf("gvisor: no runsc at %s (Debian: apt-get install runsc): %w", opts.Path, err)
	}
	old, err := os.ReadFile(opts.DaemonJSON)
	mode := os.FileMode(0o644)
	switch {
	case errors.Is(err, os.ErrNotExist):
		old = nil
	case err != nil:
		return res, fmt.Errorf("gvisor: %w", err)
	default:
		if st, err := os.Stat(opts.DaemonJSON); err == nil {
			mode = st.Mode().Perm()
		}
	}
	merged, changed, err := Merge(old, opts.Name, opts.Path, opts.Args)
	if err != nil {
		return res, fmt.Errorf("gvisor: %s: %w", opts.DaemonJSON, err)
	}
	if changed {
		if err := writeFile(opts.DaemonJSON, merged, mode); err != nil {
			return res, fmt.Errorf("gvisor: %w", err)
		}
		res.Changed = true
		if err := opts.Reload(); err != nil {
			return res, fmt.Errorf("gvisor: wrote %s but could not reload the daemon (send dockerd SIGHUP): %w", opts.DaemonJSON, err)
		}
	}
	deadline := time.Now().Add(opts.Wait)
	for {
		ok, err := opts.Listed(ctx)
		if ok {
			return res, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				err = errors.New("not listed")
			}
			return res, fmt.Errorf("gvisor: the daemon does not list runtime %q with %v after %s (does dockerd read %s? a changed entry needs SIGHUP): %w", opts.Name, opts.Args, opts.Wait, opts.DaemonJSON, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runtimeEntry is a daemon.json runtime.
type runtimeEntry struct {
	Path        string   `json:"path"`
	RuntimeArgs []string `json:"runtimeArgs,omitempty"`
}

// Merge returns the daemon configuration old (empty: none) with runtime
// name set to path and args, every other key and runtime kept as it was,
// and whether that changed anything (an entry already equal keeps old
// byte for byte).
func Merge(old []byte, name, path string, args []string) ([]byte, bool, error) {
	cfg := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(old)) > 0 {
		if err := json.Unmarshal(old, &cfg); err != nil {
			return nil, false, fmt.Errorf("not a JSON object: %w", err)
		}
		if cfg == nil {
			return nil, false, errors.New("not a JSON object: null")
		}
	}
	runtimes := map[string]json.RawMessage{}
	if raw, ok := cfg["runtimes"]; ok {
		if err := json.Unmarshal(raw, &runtimes); err != nil || runtimes == nil {
			return nil, false, fmt.Errorf("its \"runtimes\" is not an object: %v", err)
		}
	}
	want := runtimeEntry{Path: path, RuntimeArgs: args}
	if raw, ok := runtimes[name]; ok {
		var have runtimeEntry
		if json.Unmarshal(raw, &have) == nil && have.Path == want.Path && slices.Equal(have.RuntimeArgs, want.RuntimeArgs) {
			return old, false, nil
		}
	}
	entry, err := json.Marshal(want)
	if err != nil {
		return nil, false, err
	}
	runtimes[name] = entry
	if cfg["runtimes"], err = json.Marshal(runtimes); err != nil {
		return nil, false, err
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, false, err
	}
	return append(out, '\n'), true, nil
}

// writeFile replaces file with b atomically (a temporary file beside it,
// renamed over it).
func writeFile(file string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".daemon.json.*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// SignalDaemon sends SIGHUP to the dockerd whose pid pidFile holds (it
// must be a dockerd: a stale pid file names no other process).
func SignalDaemon(pidFile string) error {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("%s holds no pid: %q", pidFile, b)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return fmt.Errorf("pid %d of %s: %w", pid, pidFile, err)
	}
	if c := strings.TrimSpace(string(comm)); c != "dockerd" {
		return fmt.Errorf("pid %d of %s is %q, not dockerd", pid, pidFile, c)
	}
	return syscall.Kill(pid, syscall.SIGHUP)
}

// EngineLists reports whether the engine of the environment (DOCKER_HOST,
// ...) lists runtime name with path and args.
func EngineLists(ctx context.Context, name, path string, args []string) (bool, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return false, err
	}
	defer cli.Close()
	info, err := cli.Info(ctx)
	if err != nil {
		return false, err
	}
	rt, ok := info.Runtimes[name]
	return ok && rt.Path == path && slices.Equal(rt.Args, args), nil
}
