package nodes_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

var record = flag.Bool("record", false, "write the recorded history to ../projection/testdata/lifecycle.jsonl")

// TestRecordedHistory runs one session of every kind through every op on
// a real stack, then decodes each stored event and its data strictly
// (unknown members refused) through the events package's exported types,
// and checks that every op and phase that carries data was seen. With
// -record it writes the stream, as `engine events export` would, to the
// projection's testdata, where the golden replays and the events
// package's own decoding test read it.
func TestRecordedHistory(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Tenant: "acme", Node: nodes.Config{Capture: nodes.Capture{Limit: 64}}})
	ctx := testenv.Context(t, 2*time.Minute)
	c := st.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	fails := func(err error, code errcode.Code) {
		t.Helper()
		if errcode.Of(err) != code {
			t.Fatalf("got %v, want %s", err, code)
		}
	}
	create := func(id string, spec commands.CreateArgs) {
		t.Helper()
		spec.SessionID = id
		_, err := c.Create(ctx, spec)
		must(err)
	}

	create("s-running", commands.CreateArgs{Labels: map[string]string{"team": "a"}, Env: map[string]string{"A": "1"},
		Manifest:     []commands.ManifestEntry{{Path: "README", Content: []byte("hi\n")}, {Path: "tmp", Dir: true, Ephemeral: true}},
		ExposedPorts: []int{8080}})
	_, err := c.Exec(ctx, "s-running", commands.ExecArgs{Argv: []string{"echo", "hello"}})
	must(err)
	_, err = c.Exec(ctx, "s-running", commands.ExecArgs{Shell: "printf '\\377'; exit 3"})
	must(err)
	_, err = c.Exec(ctx, "s-running", commands.ExecArgs{Argv: []string{"sleep", "10"}, TimeoutMS: 100})
	fails(err, errcode.ExecTimeout)
	_, err = c.WriteFile(ctx, "s-running", "src/main.py", []byte("print(1)\n"), 0o640)
	must(err)
	must(c.Mkdir(ctx, "s-running", "data/raw", true))
	must(c.Remove(ctx, "s-running", "data", true, false))
	must(c.Remove(ctx, "s-running", "gone", false, true))
	_, err = c.ListPage(ctx, "s-running", commands.LsArgs{Path: "", Limit: 1})
	must(err)
	var snap commands.SnapshotResult
	must(c.Do(ctx, "s-running", commands.OpPersist, nil, &snap))
	must(c.Do(ctx, "s-running", commands.OpHydrate, commands.HydrateArgs{SnapshotID: snap.Snapshot.ID}, nil))
	_, err = c.ReadFile(ctx, "s-running", "src/main.py")
	must(err)
	_, err = c.ReadFile(ctx, "s-running", "missing")
	fails(err, errcode.NotFound)
	_, err = c.Running(ctx, "s-running")
	must(err)
	_, err = c.Port(ctx, "s-running", 8080)
	must(err)
	_, err = c.ExecStream(ctx, "s-running", commands.ExecArgs{Shell: "echo streamed"}, func(bool, []byte) {})
	must(err)
	zero := int64(0)
	p, err := c.ProcStart(ctx, "s-running", commands.ProcStartArgs{Argv: []string{"sh"}, TTY: true, YieldMS: &zero})
	must(err)
	_, err = c.ProcWrite(ctx, "s-running", commands.ProcArgs{ProcessID: p.ProcessID, Input: []byte("echo hi\n"), YieldMS: &zero})
	must(err)
	_, err = c.ProcRead(ctx, "s-running", commands.ProcArgs{ProcessID: p.ProcessID, YieldMS: &zero})
	must(err)
	must(c.ProcResize(ctx, "s-running", commands.ProcResizeArgs{ProcessID: p.ProcessID, Rows: 30, Cols: 100}))
	_, err = c.ProcList(ctx, "s-running")
	must(err)
	bg, err := c.ProcStart(ctx, "s-running", commands.ProcStartArgs{Argv: []string{"sleep", "300"}, YieldMS: &zero})
	must(err)
	must(c.ProcSignal(ctx, "s-running", commands.ProcSignalArgs{ProcessID: bg.ProcessID, Signal: "TERM"}))
	// Its proc_exit is recorded before the next session's ops, so that the
	// recording's order does not depend on timing.
	testenv.Eventually(t, 30*time.Second, func() error {
		evs, err := st.Log.Session(ctx, "acme", "s-running")
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if ev.Op == string(commands.OpProcExit) && ev.Phase == events.PhaseFinish {
				return nil
			}
		}
		return fmt.Errorf("no proc_exit recorded yet")
	})
	// The shell is left running: the node's Close records it lost.

	create("s-stopped", commands.CreateArgs{})
	must(c.Stop(ctx, "s-stopped"))
	_, err = c.Exec(ctx, "s-stopped", commands.ExecArgs{Argv: []string{"true"}})
	fails(err, errcode.InvalidState)
	must(c.Start(ctx, "s-stopped"))
	must(c.Stop(ctx, "s-stopped"))

	create("s-shutdown", commands.CreateArgs{})
	must(c.Shutdown(ctx, "s-shutdown"))

	create("s-deleted", commands.CreateArgs{})
	must(c.Shutdown(ctx, "s-deleted"))
	must(c.Delete(ctx, "s-deleted"))

	create("s-resumed", commands.CreateArgs{SecretEnv: map[string]string{"TOKEN": "hunter2-hunter2"}})
	_, err = c.WriteFile(ctx, "s-resumed", "notes.txt", []byte("kept"), 0)
	must(err)
	must(c.Do(ctx, "s-resumed", commands.OpPersist, nil, nil))
	must(c.Shutdown(ctx, "s-resumed"))
	must(c.Do(ctx, "s-resumed", commands.OpResume, commands.ResumeArgs{SecretEnv: map[string]string{"TOKEN": "hunter2-hunter2"}}, nil))

	// A fork (issue 25): the parent records it, the child's create its parent.
	fork, err := c.Fork(ctx, "s-resumed", commands.ForkRequest{N: 1}, client.WithCommandID("fork-1"))
	must(err)
	must(c.Stop(ctx, fork.Children[0]))

	_, err = c.Create(ctx, commands.CreateArgs{SessionID: "s-failed", User: "1000"}) // the local runtime cannot switch users
	fails(err, errcode.InvalidRequest)

	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(st.Agent.Close(cctx)) // its stopped event ends the recording

	var stream bytes.Buffer
	seen := map[string]bool{}
	testenv.Eventually(t, 10*time.Second, func() error {
		stream.Reset()
		last := ""
		err := st.Log.Read(ctx, events.ReadOptions{Filters: []string{">"}}, func(m events.Msg) error {
			stream.Write(m.Data)
			stream.WriteByte('\n')
			last = m.Subject
			return nil
		})
		if err != nil {
			return err
		}
		if last != st.Log.Subjects().Node("node-1", "stopped") {
			return errors.New("the node's stopped event is not stored yet")
		}
		return nil
	})
	for i, line := range bytes.Split(bytes.TrimSpace(stream.Bytes()), []byte("\n")) {
		if bytes.Contains(line, []byte(`"kind":`)) {
			if _, err := events.ParseNode(line); err != nil {
				t.Fatalf("line %d: node event: %v", i+1, err)
			}
			continue
		}
		ev, err := events.Parse(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		strict := jsonv2.RejectUnknownMembers(true)
		var whole events.Event
		if err := jsonv2.Unmarshal(line, &whole, strict); err != nil {
			t.Errorf("line %d (%s %s): the event has members events.Event does not declare: %v", i+1, ev.Op, ev.Phase, err)
		}
		d := events.NewData(ev.Op, ev.Phase)
		switch {
		case d == nil && len(ev.Data) > 0:
			t.Errorf("line %d: %s %s carries data %s, but its type says none", i+1, ev.Op, ev.Phase, ev.Data)
		case d != nil && len(ev.Data) == 0:
			if ev.Phase != events.PhaseFinish || ev.ErrorCode == "" {
				t.Errorf("line %d: %s %s has no data; only a failed finish may have none", i+1, ev.Op, ev.Phase)
			}
		case d != nil:
			if err := jsonv2.Unmarshal(ev.Data, d, strict); err != nil {
				t.Errorf("line %d: %s %s data %s does not decode strictly as %T: %v", i+1, ev.Op, ev.Phase, ev.Data, d, err)
			}
			seen[ev.Op+"."+string(ev.Phase)] = true
		}
	}
	for _, op := range commands.SessionOps {
		if op == commands.OpCheckpoint {
			// The local runtime cannot checkpoint: its events are decoded
			// strictly by TestRunscCheckpointResumeOnAnotherNode.
			continue
		}
		for _, ph := range []events.Phase{events.PhaseStart, events.PhaseFinish} {
			if events.NewData(string(op), ph) != nil && !seen[string(op)+"."+string(ph)] {
				t.Errorf("the recording has no %s %s event with data", op, ph)
			}
		}
	}
	if bytes.Contains(stream.Bytes(), []byte("hunter2")) {
		t.Error("a secret value is in the recording")
	}
	if *record {
		out := filepath.Join("..", "projection", "testdata", "lifecycle.jsonl")
		if err := os.WriteFile(out, stream.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", out, stream.Len())
	}
}
