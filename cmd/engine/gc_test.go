package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/retention"
)

// TestGC: `engine gc --dry-run` lists, and `engine gc` then removes,
// exactly what the retention flags say, on a real engine: the snapshots
// of a deleted session and a session's snapshots beyond its newest one;
// the snapshot the live session resumes from stays, and it resumes. Bad
// flags are invalid_request.
func TestGC(t *testing.T) {
	url, _ := serveFor(t, "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--runtime", "local", "--gc-interval", "0")
	for _, args := range [][]string{{"--snapshot-keep", "-1"}, {"--transfer-ttl", "0s"}, {"--deleted-retention", "-1h"}, {"--orphan-grace", "10s"}, {"extra"}} {
		if code, _, errs := cli(t, url, "", append([]string{"gc"}, args...)...); code != 2 || !strings.HasPrefix(errs, "error: invalid_request: ") {
			t.Errorf("gc %v: exit %d, %q; want invalid_request", args, code, errs)
		}
	}
	live := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	var snaps []string
	for i := range 3 {
		mustCLI(t, url, fmt.Sprintf("version %d\n", i), "sandbox", "write", live, "notes.txt")
		snaps = append(snaps, strings.TrimSpace(mustCLI(t, url, "", "sandbox", "persist", live)))
	}
	gone := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	goneSnap := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "persist", gone))
	mustCLI(t, url, "", "sandbox", "delete", gone)
	waitProjected(t, url)
	// engine status counts the sessions by status.
	var rep operator.Report
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "status", "--json", "--wait", "10ms")), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Sessions) != 2 || rep.Sessions["running"] != 1 || rep.Sessions["deleted"] != 1 {
		t.Errorf("status sessions = %v; want 1 running, 1 deleted", rep.Sessions)
	}
	if u := rep.Unfinished; u == nil || u.Puts != 0 || u.Bytes != 0 {
		t.Errorf("status unfinished puts = %+v; want none, and counted", u)
	}
	if out := mustCLI(t, url, "", "status", "--wait", "10ms"); !strings.Contains(out, "SESSIONS  1 running, 1 deleted") {
		t.Errorf("status does not summarise the sessions:\n%s", out)
	}

	want := []string{
		"beyond_keep_last " + objectName("default", live, snaps[0]),
		"beyond_keep_last " + objectName("default", live, snaps[1]),
		"deleted_session " + objectName("default", gone, goneSnap),
	}
	sort.Strings(want)
	run := func(dry bool) []string {
		t.Helper()
		args := []string{"gc", "--json", "--snapshot-keep", "1", "--deleted-retention", "0s"}
		if dry {
			args = append(args, "--dry-run")
		}
		var rs []retention.Removal
		if err := json.Unmarshal([]byte(mustCLI(t, url, "", args...)), &rs); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rs {
			got = append(got, r.Reason+" "+r.Name)
		}
		sort.Strings(got)
		return got
	}
	if got := run(true); !slices.Equal(got, want) {
		t.Fatalf("gc --dry-run:\n got %q\nwant %q", got, want)
	}
	if got := run(true); !slices.Equal(got, want) {
		t.Fatalf("a second gc --dry-run (the first removed nothing):\n got %q\nwant %q", got, want)
	}
	if got := run(false); !slices.Equal(got, want) {
		t.Fatalf("gc:\n got %q\nwant %q", got, want)
	}
	if got := run(false); len(got) != 0 {
		t.Errorf("gc again: %q; want nothing left to remove", got)
	}
	var left []objectstore.Snapshot
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "snapshot", "ls", "--all-tenants", "--json")), &left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].ID != snaps[2] {
		t.Fatalf("snapshots left: %+v; want only %s", left, snaps[2])
	}
	mustCLI(t, url, "", "sandbox", "shutdown", live)
	mustCLI(t, url, "", "sandbox", "resume", live)
	if out := mustCLI(t, url, "", "sandbox", "read", live, "notes.txt"); out != "version 2\n" {
		t.Errorf("after gc and a resume, notes.txt = %q", out)
	}
}

// objectName is the object of a manifest snapshot (what persist writes).
func objectName(tenant, session, id string) string {
	name, _ := objectstore.ManifestName(tenant, session, id)
	return name
}
