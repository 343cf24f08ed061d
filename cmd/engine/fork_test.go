package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/projection"
)

// TestCLIFork: engine sandbox fork prints one child id a line (--json: a
// list with the parent point); the children have the parent's files;
// replay --tree prints the family from its root, a grandchild included;
// replay --verify and audit verify are clean after forks.
func TestCLIFork(t *testing.T) {
	url, _ := serveFor(t, "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local")
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create"))
	mustCLI(t, url, "hello", "sandbox", "write", id, "greeting.txt")
	out := mustCLI(t, url, "", "sandbox", "fork", id, "-n", "3")
	kids := strings.Fields(out)
	if len(kids) != 3 || strings.Count(out, "\n") != 3 {
		t.Fatalf("sandbox fork -n 3 printed %q, want 3 ids, one a line", out)
	}
	for _, k := range kids {
		if got := mustCLI(t, url, "", "sandbox", "read", k, "greeting.txt"); got != "hello" {
			t.Fatalf("child %s reads %q, want the parent's", k, got)
		}
	}
	var listed []struct {
		SessionID string          `json:"session_id"`
		Parent    commands.Parent `json:"parent"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "sandbox", "fork", kids[0], "--json")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Parent.SessionID != kids[0] || listed[0].Parent.RootSHA256 == "" {
		t.Fatalf("sandbox fork --json = %+v, want one child of %s with its point", listed, kids[0])
	}
	grandchild := listed[0].SessionID

	// The tree, asked from the grandchild, starts at the root.
	tree := mustCLI(t, url, "", "replay", "--tree", grandchild)
	lines := strings.Split(strings.TrimSpace(tree), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], id+" running") {
		t.Fatalf("replay --tree =\n%s\nwant the root and its 4 descendants", tree)
	}
	if !regexp.MustCompile(`(?m)^    ` + grandchild + ` running @\d+ \S+ [0-9a-f]{12}$`).MatchString(tree) {
		t.Fatalf("replay --tree =\n%s\nwant the grandchild at depth 2 with its point", tree)
	}
	var node projection.TreeNode
	if err := json.Unmarshal([]byte(mustCLI(t, url, "", "replay", "--tree", id, "--json")), &node); err != nil {
		t.Fatal(err)
	}
	if node.SessionID != id || len(node.Children) != 3 || node.Parent != nil {
		t.Fatalf("replay --tree --json = %+v", node)
	}
	for _, c := range []string{"fork", "fork " + id + " -n 0", "fork " + id + " --from x --at 3"} {
		code, _, errs := cli(t, url, "", append([]string{"sandbox"}, strings.Fields(c)...)...)
		if code != 2 || !strings.HasPrefix(errs, "error: invalid_request: ") {
			t.Errorf("engine sandbox %s = exit %d, %q; want 2 and invalid_request", c, code, errs)
		}
	}
	waitProjected(t, url)
	if out := mustCLI(t, url, "", "replay", "--verify"); !strings.HasPrefix(out, "verified: ") {
		t.Errorf("replay --verify after forks = %q", out)
	}
	if out := mustCLI(t, url, "", "audit", "verify"); !strings.Contains(out, " 0 failures") {
		t.Errorf("audit verify after forks = %q", out)
	}
}
