package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/commands"
)

// TestSandboxDiff: `engine sandbox diff` on a real engine with a local
// node, between two persists: "+", "~", "-" lines sorted by path and a
// summary; --json is the op's result; --to the first persist's seq
// compares it with an empty workspace. Bad inputs: from after to and an
// unknown session fail with their codes.
func TestSandboxDiff(t *testing.T) {
	url, _ := serveFor(t, "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--runtime", "local", "--gc-interval", "0")
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	mustCLI(t, url, "before", "sandbox", "write", id, "edit.txt")
	mustCLI(t, url, "bye", "sandbox", "write", id, "gone.txt")
	var first commands.Snapshot
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "sandbox", "persist", id, "--json")), &first); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, url, "after!", "sandbox", "write", id, "edit.txt")
	mustCLI(t, url, "", "sandbox", "rm", id, "gone.txt")
	mustCLI(t, url, "new", "sandbox", "write", id, "new.txt")
	mustCLI(t, url, "", "sandbox", "persist", id)

	out := mustCLI(t, url, "", "sandbox", "diff", id)
	want := "~ edit.txt\n- gone.txt\n+ new.txt\n1 created, 1 modified, 1 removed from " + first.ID
	if !strings.HasPrefix(out, want) {
		t.Fatalf("sandbox diff:\n%s\nwant it to start with:\n%s", out, want)
	}
	var res commands.DiffResult
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "sandbox", "diff", id, "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Created != 1 || res.Modified != 1 || res.Removed != 1 || len(res.Changes) != 3 || res.From == nil || res.From.ID != first.ID {
		t.Fatalf("sandbox diff --json = %+v", res)
	}
	out = mustCLI(t, url, "", "sandbox", "diff", id, "--to", jsonNumber(first.Seq))
	if !strings.Contains(out, "+ edit.txt\n+ gone.txt\n") || !strings.Contains(out, "2 created, 0 modified, 0 removed from an empty workspace") {
		t.Fatalf("sandbox diff --to %d:\n%s", first.Seq, out)
	}
	if code, _, errs := cli(t, url, "", "sandbox", "diff", id, "--from", "9", "--to", "3"); code != 2 || !strings.Contains(errs, "invalid_request") {
		t.Fatalf("from after to: exit %d, %q; want invalid_request", code, errs)
	}
	if code, _, errs := cli(t, url, "", "sandbox", "diff", "no-such-session"); code == 0 || !strings.Contains(errs, "session_not_found") {
		t.Fatalf("unknown session: exit %d, %q; want session_not_found", code, errs)
	}
}

func jsonNumber(n uint64) string { b, _ := json.Marshal(n); return string(b) }
