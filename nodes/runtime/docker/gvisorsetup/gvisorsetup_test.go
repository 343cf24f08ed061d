package gvisorsetup_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/docker/gvisorsetup"
)

// TestMerge: the runtime is added, every other key and runtime kept; an
// entry already right changes nothing, byte for byte; a wrong one is
// replaced.
func TestMerge(t *testing.T) {
	old := []byte(`{"data-root": "/var/lib/docker", "log-opts": {"max-size": "10m"}, "runtimes": {"kata": {"path": "/usr/bin/kata"}}, "experimental": false}`)
	out, changed, err := gvisorsetup.Merge(old, "runsc", "/usr/bin/runsc", docker.GVisorRuntimeArgs)
	if err != nil || !changed {
		t.Fatalf("Merge = %v, %v; want a change", changed, err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"data-root": "/var/lib/docker", "log-opts": map[string]any{"max-size": "10m"}, "experimental": false,
		"runtimes": map[string]any{
			"kata":  map[string]any{"path": "/usr/bin/kata"},
			"runsc": map[string]any{"path": "/usr/bin/runsc", "runtimeArgs": []any{"--network=none", "--host-uds=open"}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged: got %v, want %v", got, want)
	}
	again, changed, err := gvisorsetup.Merge(out, "runsc", "/usr/bin/runsc", docker.GVisorRuntimeArgs)
	if err != nil || changed || string(again) != string(out) {
		t.Errorf("Merge of its own output = changed %v, %v; want no change", changed, err)
	}
	// The entry the machine had before (no host-uds) is replaced.
	stale := []byte(`{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}`)
	if out, changed, err := gvisorsetup.Merge(stale, "runsc", "/usr/bin/runsc", docker.GVisorRuntimeArgs); err != nil || !changed || !json.Valid(out) {
		t.Errorf("Merge of a stale entry = %v, %v; want a change", changed, err)
	}
	if _, changed, err := gvisorsetup.Merge(nil, "runsc", "/usr/bin/runsc", nil); err != nil || !changed {
		t.Errorf("Merge of no file = %v, %v", changed, err)
	}
}

// TestMergeBadInput: a file that is not a JSON object, or whose runtimes
// are not one, is an error, never overwritten.
func TestMergeBadInput(t *testing.T) {
	for _, in := range []string{`[1]`, `null`, `{"runtimes": 3}`, `{"runtimes": null}`, `{`, `"x"`} {
		if _, _, err := gvisorsetup.Merge([]byte(in), "runsc", "/usr/bin/runsc", nil); err == nil {
			t.Errorf("Merge(%s): no error", in)
		}
	}
}

// TestRegister: the file is written (mode kept) and the daemon reloaded
// once; a second run writes and reloads nothing; a daemon that never lists
// the runtime fails the call within its wait; a broken file is left as it
// was.
func TestRegister(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(file, []byte(`{"mtu": 1400}`), 0o600); err != nil {
		t.Fatal(err)
	}
	runsc := filepath.Join(dir, "runsc")
	if err := os.WriteFile(runsc, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	reloads := 0
	listed := false
	opts := gvisorsetup.Options{DaemonJSON: file, Path: runsc,
		Reload: func() error { reloads++; listed = true; return nil },
		Listed: func(context.Context) (bool, error) { return listed, nil },
		Wait:   5 * time.Second}
	res, err := gvisorsetup.Register(t.Context(), opts)
	if err != nil || !res.Changed || reloads != 1 {
		t.Fatalf("Register = %+v, %v, %d reloads; want a change and one reload", res, err, reloads)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode after: %v, %v; want 0600 kept", st.Mode(), err)
	}
	b, _ := os.ReadFile(file)
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil || cfg["mtu"] != float64(1400) || cfg["runtimes"] == nil {
		t.Errorf("file after: %s, %v", b, err)
	}
	if res, err := gvisorsetup.Register(t.Context(), opts); err != nil || res.Changed || reloads != 1 {
		t.Errorf("second Register = %+v, %v, %d reloads; want no change", res, err, reloads)
	}

	never := opts
	never.Name, never.Listed, never.Wait = "other", func(context.Context) (bool, error) { return false, nil }, 300*time.Millisecond
	if _, err := gvisorsetup.Register(t.Context(), never); err == nil {
		t.Error("Register with a daemon that never lists it: no error")
	}
	failing := opts
	failing.Name, failing.Reload = "third", func() error { return errors.New("no dockerd") }
	if _, err := gvisorsetup.Register(t.Context(), failing); err == nil {
		t.Error("Register with a failing reload: no error")
	}

	broken := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(broken, []byte(`{"mtu": `), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := opts
	bad.DaemonJSON = broken
	if _, err := gvisorsetup.Register(t.Context(), bad); err == nil {
		t.Error("Register of a broken file: no error")
	}
	if b, _ := os.ReadFile(broken); string(b) != `{"mtu": ` {
		t.Errorf("broken file rewritten: %q", b)
	}
	missing := opts
	missing.Path = filepath.Join(dir, "no-runsc")
	if _, err := gvisorsetup.Register(t.Context(), missing); err == nil {
		t.Error("Register without runsc: no error")
	}
}

// TestSignalDaemonRefusesOthers: a pid file that names no dockerd (a stale
// one, or garbage) is never signalled.
func TestSignalDaemonRefusesOthers(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"garbage", "1", "0", "-5", "999999999"} {
		f := filepath.Join(dir, "pid")
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := gvisorsetup.SignalDaemon(f); err == nil {
			t.Errorf("SignalDaemon(%q): no error", content)
		}
	}
	// This test process is not dockerd.
	f := filepath.Join(dir, "self")
	if err := os.WriteFile(f, []byte(itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := gvisorsetup.SignalDaemon(f); err == nil {
		t.Error("SignalDaemon of the test's own pid: no error")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
