package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/projector"
	"github.com/paddock-dev/paddock/storage"
	"github.com/paddock-dev/paddock/testenv"
)

// streamsByName returns `engine status --json`'s streams by name.
func streamsByName(t *testing.T, url string) map[string]operator.StreamStatus {
	t.Helper()
	var rep operator.Report
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "status", "--json", "--wait", "10ms")), &rep); err != nil {
		t.Fatal(err)
	}
	out := map[string]operator.StreamStatus{}
	for _, s := range rep.Streams {
		out[s.Name] = s
	}
	return out
}

// persistUntilFull persists session id until the CLI refuses, and returns
// how many persists succeeded. Each persist has a small change to store
// (a persist of an unchanged workspace stores nothing, in either format).
func persistUntilFull(t *testing.T, url, id string) int {
	t.Helper()
	for n := 0; n < 30; n++ {
		mustCLI(t, url, "", "sandbox", "exec", id, "--", "sh", "-c", fmt.Sprintf("echo %d > n", n))
		code, _, errs := cli(t, url, "", "sandbox", "persist", id)
		if code == 0 {
			continue
		}
		if code != exitFailure || !strings.HasPrefix(errs, "error: storage_quota_exceeded: ") || !strings.Contains(errs, "sbx_workspaces") || !strings.Contains(errs, "engine snapshot rm") {
			t.Fatalf("persist %d: exit %d, %q; want storage_quota_exceeded naming the bucket and engine snapshot rm", n+1, code, errs)
		}
		return n
	}
	t.Fatalf("30 persists of 4 MiB fit")
	return 0
}

// TestServeStorage: `engine serve --max-store 40m` splits the store
// between its streams, the workspace bucket fills and refuses persists
// with a clear error while execs and their events go on, `engine status`
// and the engine's log warn, a restart keeps the limits, deleting
// snapshots (one session's, or deleted sessions') frees the quota with
// nothing restarted, and a full projection bucket does not stop events
// either.
func TestServeStorage(t *testing.T) {
	const store = 40 << 20
	dir := t.TempDir()
	// Tar snapshots: each persist stores the whole workspace again (a
	// manifest persist stores only the chunks the store lacks).
	args := []string{"--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--max-store", "40m", "--snapshot-format", "tar"}
	url, stop := serveFor(t, args...)
	def := storage.Defaults(store)
	st := streamsByName(t, url)
	objects := objectstore.StreamName(objectstore.DefaultBucket)
	for name, want := range map[string]int64{events.DefaultStream: def.Events, objects: def.Objects, "KV_" + projector.SessionsBucket: def.KV, "KV_" + projector.StateBucket: def.KV} {
		if st[name].MaxBytes != want {
			t.Fatalf("%s: max bytes %d, want %d (of a %d-byte store)", name, st[name].MaxBytes, want, store)
		}
	}

	a := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	mustCLI(t, url, "", "sandbox", "exec", a, "--", "sh", "-c", "head -c 4194304 /dev/urandom > big")
	stored := persistUntilFull(t, url, a)
	if stored < 4 {
		t.Fatalf("%d persists of 4 MiB fit in %d bytes", stored, def.Objects)
	}
	st = streamsByName(t, url)
	if o := st[objects]; o.UsedPercent < storage.WarnPercent || !strings.Contains(o.Warning, "persists and transfers fail") {
		t.Fatalf("status of the full bucket: %+v; want %d%% or more and a warning", o, storage.WarnPercent)
	}
	if out := mustCLI(t, url, "", "status"); !regexp.MustCompile(`OBJ_sbx_workspaces\s+\d+\s+\d+\s+\d+\.\d% WARNING`).MatchString(out) {
		t.Fatalf("engine status does not warn about the bucket:\n%s", out)
	}

	// A restart without the limit flags keeps the limits, and warns at once.
	stop()
	url, _ = serveFor(t, args...)
	testenv.Eventually(t, 10*time.Second, func() error {
		st = streamsByName(t, url)
		if st[objects].MaxBytes != def.Objects || st[events.DefaultStream].MaxBytes != def.Events {
			return fmt.Errorf("limits after the restart: %+v", st)
		}
		return nil
	})

	// Local sessions do not outlive their node: a new one.
	b := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	mustCLI(t, url, "", "sandbox", "exec", b, "--", "sh", "-c", "head -c 4194304 /dev/urandom > big")
	if code, _, errs := cli(t, url, "", "sandbox", "persist", b); code != exitFailure || !strings.Contains(errs, "storage_quota_exceeded") {
		t.Fatalf("persist into the full bucket: exit %d, %q", code, errs)
	}
	for i := range 3 {
		if out := mustCLI(t, url, "", "sandbox", "exec", b, "--", "echo", fmt.Sprint("exec ", i)); out != fmt.Sprintf("exec %d\n", i) {
			t.Fatalf("exec with the bucket full: %q", out)
		}
	}
	tail := mustCLI(t, url, "", "events", "tail", "--session", b, "--no-follow")
	if !regexp.MustCompile(`persist\s+finish FAILED storage_quota_exceeded`).MatchString(tail) || strings.Count(tail, "exec     finish ok") != 4 {
		t.Fatalf("events of %s:\n%s\nwant the failed persist and four execs recorded", b, tail)
	}

	// Freeing space: one session's snapshots, then a deleted session's.
	if out := mustCLI(t, url, "", "snapshot", "ls", a); !strings.Contains(out, fmt.Sprintf("(%d snapshots, ", stored)) {
		t.Fatalf("snapshot ls %s:\n%s", a, out)
	}
	if out := mustCLI(t, url, "", "snapshot", "rm", a, "--all"); !strings.HasPrefix(out, fmt.Sprintf("deleted %d snapshots", stored)) {
		t.Fatalf("snapshot rm --all: %q", out)
	}
	mustCLI(t, url, "", "sandbox", "persist", b)
	mustCLI(t, url, "", "sandbox", "delete", b)
	testenv.Eventually(t, 30*time.Second, func() error {
		out := mustCLI(t, url, "", "sandbox", "list", "--status", "deleted")
		if !strings.Contains(out, b) {
			return fmt.Errorf("%s not listed as deleted yet", b)
		}
		return nil
	})
	if out := mustCLI(t, url, "", "snapshot", "rm", "--deleted"); !strings.HasPrefix(out, "deleted 1 snapshots") {
		t.Fatalf("snapshot rm --deleted: %q", out)
	}
	if out := mustCLI(t, url, "", "snapshot", "ls"); !strings.Contains(out, "(0 snapshots, 0 bytes)") {
		t.Fatalf("snapshot ls after freeing:\n%s", out)
	}

	// The projection's buckets are bounded too: filling one stops neither
	// the events nor the sessions.
	js := testenv.JetStream(t, testenv.Connect(t, url))
	ctx := testenv.Context(t, time.Minute)
	kv, err := js.KeyValue(ctx, projector.StateBucket)
	if err != nil {
		t.Fatal(err)
	}
	var refused error
	for i := 0; refused == nil && i < 10_000; i++ {
		_, refused = kv.Put(ctx, fmt.Sprint("junk.", i), bytes.Repeat([]byte("j"), 1000))
	}
	if !storage.StreamRefused(refused) {
		t.Fatalf("filling %s ended with %v; want it refused at its own limit", projector.StateBucket, refused)
	}
	c := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	mustCLI(t, url, "", "sandbox", "exec", c, "--", "true")
	if tail := mustCLI(t, url, "", "events", "tail", "--session", c, "--no-follow"); strings.Count(tail, "finish ok") != 2 {
		t.Fatalf("events of %s with a projection bucket full:\n%s", c, tail)
	}
}

// TestServeStorageWarnsAtStart: an engine started on a deployment whose
// workspace bucket is nearly full warns in its log at once.
func TestServeStorageWarnsAtStart(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--max-store", "40m", "--objects-max-bytes", "2m"}
	url, stop := serveFor(t, args...)
	js := testenv.JetStream(t, testenv.Connect(t, url))
	ctx := testenv.Context(t, time.Minute)
	obs, err := js.ObjectStore(ctx, objectstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, "uploads/default/big", make([]byte, 1800<<10)); err != nil {
		t.Fatal(err)
	}
	stop()
	logs, _ := serveStoppable(t, args...)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !regexp.MustCompile(`stream nearly full" stream=OBJ_sbx_workspaces .* at_limit="writes to it are refused"`).MatchString(logs.String()) {
			return fmt.Errorf("no warning in the log yet")
		}
		return nil
	})
}

func TestServeStorageBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--objects-max-bytes", "0"},
		{"--kv-max-bytes", "lots"},
		{"--max-store", "-1"},
		{"--max-store", "1g", "--nats-url", "nats://127.0.0.1:1"},
	} {
		var errb bytes.Buffer
		code := run(context.Background(), append([]string{"serve", "--state-dir", t.TempDir()}, args...), nil, &errb, &errb)
		if code != 2 || !strings.Contains(errb.String(), "error: invalid_request: ") {
			t.Errorf("serve %v = exit %d, %q; want 2 and invalid_request", args, code, errb.String())
		}
	}
}

// TestServeStorageUpgrade: a deployment whose streams were made without
// limits gets them on the next start where that is safe; a stream that
// already holds more than its default keeps none, and the log says so.
func TestServeStorageUpgrade(t *testing.T) {
	const store = 40 << 20
	dir := t.TempDir()
	b, err := broker.Start(broker.Config{StoreDir: filepath.Join(dir, "jetstream"), Port: -1, MaxStore: store, SyncInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown) // shut down below; twice is fine
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, time.Minute)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	obs, err := objectstore.Ensure(ctx, js, objectstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	def := storage.Defaults(store)
	if _, err := obs.PutBytes(ctx, "uploads/default/old", make([]byte, def.Objects+1<<20)); err != nil {
		t.Fatal(err)
	}
	b.Shutdown()

	logs, _ := serveStoppable(t, "--state-dir", dir, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--max-store", "40m", "--no-auth")
	url := readyRE.FindStringSubmatch(logs.String())[1]
	t.Setenv("PADDOCK_CREDS", "none")
	st := streamsByName(t, url)
	if st[events.DefaultStream].MaxBytes != def.Events || st["KV_"+projector.SessionsBucket].MaxBytes != def.KV {
		t.Fatalf("after the upgrade: events %d, sessions %d bytes; want %d and %d", st[events.DefaultStream].MaxBytes, st["KV_"+projector.SessionsBucket].MaxBytes, def.Events, def.KV)
	}
	if o := st[objectstore.StreamName(objectstore.DefaultBucket)]; o.MaxBytes != 0 || !strings.Contains(logs.String(), "more than the default limit") {
		t.Fatalf("the bucket that holds more than its default: limit %d; log:\n%s\nwant none, and a note", o.MaxBytes, logs.String())
	}
}
