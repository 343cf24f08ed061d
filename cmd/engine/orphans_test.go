package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/retention"
	"github.com/paddock-dev/paddock/testenv"
)

// TestKill9DuringPersist: the engine binary is killed with SIGKILL while
// it persists a 256 MiB workspace. After a restart on the same state dir
// `engine status` shows the killed put's chunks with their true size (the
// stream's bytes), `engine gc` leaves them while they are younger than the
// grace period, and a sweep removes them with that size.
// It takes a minute or two here (a build, two engine starts, 256 MiB);
// -short skips it.
func TestKill9DuringPersist(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 during a 256 MiB persist: skipped with -short")
	}
	bin := testenv.BuildBinary(t, "./cmd/engine")
	dir, sandboxes := t.TempDir(), t.TempDir()
	start := func() (string, *exec.Cmd) {
		t.Helper()
		url, cmd, _ := startServeBinary(t, bin, 60*time.Second, "--state-dir", dir, "--sandbox-dir", sandboxes, "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--gc-interval", "0",
			"--snapshot-format", "tar") // one put of 256 MiB (a manifest of this file is one chunk)
		return url, cmd
	}
	url, cmd := start()
	t.Setenv("PADDOCK_CREDS", auth.Open(auth.DirIn(dir)).CredsPath("admin"))
	ctx := testenv.Context(t, 5*time.Minute)
	nc := testenv.Connect(t, url)
	c, err := client.New(nc, client.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	fill := `head -c 1048576 /dev/urandom > .blk && i=0 && while [ $i -lt 256 ]; do cat .blk; i=$((i+1)); done > big && rm .blk`
	if res, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: fill, TimeoutMS: 120_000}); err != nil || res.ExitCode != 0 {
		t.Fatalf("fill: %+v, %v", res, err)
	}
	store, err := objectstore.Open(ctx, testenv.JetStream(t, nc), "")
	if err != nil {
		t.Fatal(err)
	}
	persisted := make(chan error, 1)
	go func() { _, err := c.Persist(ctx, s.SessionID); persisted <- err }() // ends when the engine dies
	testenv.Eventually(t, time.Minute, func() error {
		select {
		case err := <-persisted:
			t.Fatalf("the persist ended before the kill: %v", err)
		default:
		}
		cs, err := store.UnnamedChunks(ctx)
		if err != nil || len(cs) == 0 || cs[0].Msgs < 8 {
			return fmt.Errorf("the persist has stored %+v (%v) so far", cs, err)
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-persisted; err == nil {
		t.Fatal("a persist whose engine was killed succeeded")
	}
	nc.Close()

	url, _ = start()
	var rep operator.Report
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "status", "--json", "--wait", "10ms")), &rep); err != nil {
		t.Fatal(err)
	}
	u := rep.Unfinished
	if u == nil || u.Puts != 1 || u.Bytes < 4*objectstore.ChunkSize {
		t.Fatalf("status after kill -9 mid-persist: unfinished puts %+v; want one put's chunks", u)
	}
	var obj operator.StreamStatus
	for _, st := range rep.Streams {
		if st.Name == objectstore.StreamName(objectstore.DefaultBucket) {
			obj = st
		}
	}
	if obj.Bytes < uint64(u.Bytes) || obj.Bytes > uint64(u.Bytes)+u.Each[0].Msgs*256 {
		t.Fatalf("the bucket holds %d bytes; status says the orphan has %d", obj.Bytes, u.Bytes)
	}
	if out := mustCLI(t, url, "", "status", "--wait", "10ms"); !regexp.MustCompile(fmt.Sprintf(`UNFINISHED PUTS +1, %d bytes`, u.Bytes)).MatchString(out) {
		t.Errorf("status does not show the unfinished put:\n%s", out)
	}
	// Younger than the grace period: engine gc leaves it.
	var rs []retention.Removal
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "gc", "--json", "--dry-run")), &rs); err != nil || len(rs) != 0 {
		t.Fatalf("gc --dry-run right after the kill: %+v, %v; want nothing (within the grace period)", rs, err)
	}
	nc2 := testenv.Connect(t, url)
	store2, err := objectstore.Open(ctx, testenv.JetStream(t, nc2), "")
	if err != nil {
		t.Fatal(err)
	}
	const grace = time.Second // a library caller may go below the flags' minute
	testenv.Eventually(t, 30*time.Second, func() error {
		if since := time.Since(u.Each[0].Last); since <= grace {
			return fmt.Errorf("last chunk written %s ago", since)
		}
		return nil
	})
	done, err := retention.SweepOrphans(ctx, store2, retention.Policy{TransferTTL: time.Hour, OrphanGrace: grace}, false, nil)
	if err != nil || len(done) != 1 || done[0].Size != u.Bytes {
		t.Fatalf("sweep: %+v, %v; want the orphan's %d bytes", done, err, u.Bytes)
	}
	if cs, err := store2.UnnamedChunks(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("unnamed chunks after the sweep: %+v, %v", cs, err)
	}
}
