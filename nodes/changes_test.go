package nodes_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// changesData is the changes field every finish data that records them has.
type changesData struct {
	Changes *commands.Changes `json:"changes"`
}

// finishChanges returns the changes recorded in the finish events of op,
// in order, read back from the session's log.
func finishChanges(t *testing.T, st *testenv.Stack, id string, op commands.Op) []*commands.Changes {
	t.Helper()
	var out []*commands.Changes
	for _, ev := range sessionEvents(t, st, "default", id) {
		if ev.Op != string(op) || ev.Phase != events.PhaseFinish {
			continue
		}
		c, err := events.DecodeData[changesData](ev)
		if err != nil {
			t.Fatalf("%s finish seq %d: %v", op, ev.Seq, err)
		}
		out = append(out, c.Changes)
	}
	return out
}

// lastChanges is the changes of op's last finish event.
func lastChanges(t *testing.T, st *testenv.Stack, id string, op commands.Op) *commands.Changes {
	t.Helper()
	all := finishChanges(t, st, id, op)
	if len(all) == 0 {
		t.Fatalf("no %s finish event", op)
	}
	return all[len(all)-1]
}

// checkChanges fails unless c holds exactly the paths want ("created a"
// and so on, in any order), counted, observed as said and not truncated.
func checkChanges(t *testing.T, what string, c *commands.Changes, observed string, want ...string) {
	t.Helper()
	if c == nil {
		t.Fatalf("%s: no changes recorded", what)
	}
	var got []string
	counts := map[string]int{}
	for _, p := range c.Paths {
		got = append(got, p.Change+" "+p.Path)
	}
	for _, w := range want {
		counts[strings.Fields(w)[0]]++
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got paths %q, want %q", what, got, want)
	}
	if c.Created != counts["created"] || c.Modified != counts["modified"] || c.Removed != counts["removed"] {
		t.Fatalf("%s: got +%d ~%d -%d, want +%d ~%d -%d", what, c.Created, c.Modified, c.Removed,
			counts["created"], counts["modified"], counts["removed"])
	}
	if c.Observed != observed || c.Truncated {
		t.Fatalf("%s: got observed %q truncated %v, want %q and not truncated", what, c.Observed, c.Truncated, observed)
	}
}

// testChanges is the body of the change attribution tests on both
// runtimes: write, mkdir, rm exact; exec watched, with exact counts and
// paths, a thousand files counted, more paths than listed truncated; a
// process that runs while an exec does makes both approximate.
func testChanges(t *testing.T, ctx context.Context, st *testenv.Stack, id string) {
	c := st.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.WriteFile(ctx, id, "a.txt", []byte("hello"), 0o644)
	must(err)
	checkChanges(t, "write new", lastChanges(t, st, id, commands.OpWrite), commands.ObservedExact, "created a.txt")
	if got := lastChanges(t, st, id, commands.OpWrite).BytesWritten; got != 5 {
		t.Fatalf("write: got %d bytes written, want 5", got)
	}
	_, err = c.WriteFile(ctx, id, "a.txt", []byte("hello again"), 0o644)
	must(err)
	checkChanges(t, "write again", lastChanges(t, st, id, commands.OpWrite), commands.ObservedExact, "modified a.txt")
	_, err = c.WriteFile(ctx, id, "d/e/f.txt", []byte("x"), 0o644)
	must(err)
	checkChanges(t, "write with parents", lastChanges(t, st, id, commands.OpWrite), commands.ObservedExact,
		"created d", "created d/e", "created d/e/f.txt")
	must(c.Mkdir(ctx, id, "m/n", true))
	checkChanges(t, "mkdir -p", lastChanges(t, st, id, commands.OpMkdir), commands.ObservedExact, "created m", "created m/n")
	must(c.Mkdir(ctx, id, "m/n/o", false))
	checkChanges(t, "mkdir", lastChanges(t, st, id, commands.OpMkdir), commands.ObservedExact, "created m/n/o")

	res, err := c.Exec(ctx, id, commands.ExecArgs{Shell: `printf hello > new.txt; echo x >> a.txt; rm d/e/f.txt; mkdir g; : > g/h`})
	must(err)
	if res.ExitCode != 0 {
		t.Fatalf("exec exited %d: %s", res.ExitCode, res.Stderr)
	}
	ec := lastChanges(t, st, id, commands.OpExec)
	checkChanges(t, "exec", ec, commands.ObservedWatch,
		"created new.txt", "modified a.txt", "removed d/e/f.txt", "created g", "created g/h")
	if ec.Overlapped || ec.BytesWritten < 5+12 {
		t.Fatalf("exec: got overlapped %v, %d bytes written (want >= 17)", ec.Overlapped, ec.BytesWritten)
	}

	// A thousand files made by a command that exits at once: all counted.
	_, err = c.Exec(ctx, id, commands.ExecArgs{Shell: `mkdir many && cd many && i=0; while [ $i -lt 1000 ]; do : > f$i; i=$((i+1)); done`})
	must(err)
	ec = lastChanges(t, st, id, commands.OpExec)
	if ec.Created != 1001 || !ec.Truncated || len(ec.Paths) != commands.MaxChangedPaths {
		t.Fatalf("1000 files: got +%d truncated %v with %d paths, want +1001, truncated, %d paths",
			ec.Created, ec.Truncated, len(ec.Paths), commands.MaxChangedPaths)
	}

	must(c.Remove(ctx, id, "m", true, false))
	checkChanges(t, "rm -r", lastChanges(t, st, id, commands.OpRm), commands.ObservedExact, "removed m", "removed m/n", "removed m/n/o")
	must(c.Remove(ctx, id, "a.txt", false, false))
	checkChanges(t, "rm", lastChanges(t, st, id, commands.OpRm), commands.ObservedExact, "removed a.txt")
	must(c.Remove(ctx, id, "many", true, false))
	if rc := lastChanges(t, st, id, commands.OpRm); rc.Removed != 1001 || !rc.Truncated {
		t.Fatalf("rm -r many: got -%d truncated %v, want -1001 truncated", rc.Removed, rc.Truncated)
	}

	// A process writing in the background while an exec runs: both
	// records are marked approximate.
	d := procDriver{t: t, ctx: ctx, c: c, id: id, first: map[int64]string{}, done: map[int64]commands.ProcResult{}}
	p := d.start(commands.ProcStartArgs{Shell: `echo ready; read x; : > bg.txt`})
	d.until(p.ProcessID, "ready")
	_, err = c.Exec(ctx, id, commands.ExecArgs{Shell: `: > fg.txt`})
	must(err)
	ec = lastChanges(t, st, id, commands.OpExec)
	if !ec.Overlapped || ec.Created != 1 {
		t.Fatalf("exec beside a process: got +%d overlapped %v, want +1 and overlapped", ec.Created, ec.Overlapped)
	}
	d.write(p.ProcessID, "go\n")
	d.until(p.ProcessID, "")
	testenv.Eventually(t, 20*time.Second, func() error {
		if len(finishChanges(t, st, id, commands.OpProcExit)) == 0 {
			return fmt.Errorf("no proc_exit yet")
		}
		return nil
	})
	pc := lastChanges(t, st, id, commands.OpProcExit)
	if pc == nil || !pc.Overlapped || pc.Created != 2 || pc.Observed != commands.ObservedWatch {
		t.Fatalf("proc_exit: got %+v, want fg.txt and bg.txt created, overlapped", pc)
	}
}

// TestChanges: change attribution on the local runtime, through a real
// node, read back from the log.
func TestChanges(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 2*time.Minute)
	cr, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	testChanges(t, ctx, st, cr.SessionID)
}

// TestDockerChanges: change attribution on the Docker runtime, watched by
// the supervisor inside the container.
func TestDockerChanges(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "changes-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	startAgent(t, st, nodes.Config{ID: node}, rt)
	ctx := testenv.Context(t, 3*time.Minute)
	cr, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image})
	if err != nil {
		t.Fatal(err)
	}
	testChanges(t, ctx, st, cr.SessionID)
	if err := st.Client.Delete(ctx, cr.SessionID); err != nil {
		t.Fatal(err)
	}
}

// TestChangeAttributionOff: a node with attribution off records none.
func TestChangeAttributionOff(t *testing.T) {
	off := false
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{ChangeAttribution: &off}})
	ctx := testenv.Context(t, time.Minute)
	cr, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Exec(ctx, cr.SessionID, commands.ExecArgs{Shell: `: > x`}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.WriteFile(ctx, cr.SessionID, "y", []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, op := range []commands.Op{commands.OpExec, commands.OpWrite} {
		if c := lastChanges(t, st, cr.SessionID, op); c != nil {
			t.Fatalf("%s: got changes %+v with attribution off", op, c)
		}
	}
}
