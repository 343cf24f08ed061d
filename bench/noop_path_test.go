package bench_test

import (
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/testenv"
)

// TestNoopThroughThePath: the benchmarks' noop runtime serves a create and
// an exec through the whole path on one server, and the exec is recorded
// as exiting 0 with no output.
func TestNoopThroughThePath(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Runtimes: []runtime.Runtime{noop{}}})
	ctx := testenv.Context(t, 30*time.Second)
	s, err := st.Client.Create(ctx, commands.CreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || len(res.Stdout) != 0 {
		t.Fatalf("exec: got exit %d, stdout %q; want 0 and none", res.ExitCode, res.Stdout)
	}
	evs, err := st.Log.Session(ctx, "default", s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 {
		t.Fatalf("got %d events, want 4 (create and exec, start and finish)", len(evs))
	}
}
