package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
)

// BenchmarkExecChanges measures what change attribution adds to an exec
// of `true`: the same sandbox's Exec with ExecSpec.Changes off (base) and
// on (paddock), alternating, on the local runtime and on the Docker
// runtime through its supervisor (whose watch runs in the container). The
// difference of the p50s is the overhead (goal: at most 0.5 ms).
//
//	go test -run '^$' -bench BenchmarkExecChanges -benchtime 400x ./nodes/
func BenchmarkExecChanges(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, sb runtime.Sandbox) {
		// A workspace with something in it, so the watch has a tree.
		for _, p := range []string{"src/a.go", "src/b/c.go", "docs/readme.md"} {
			if err := sb.WriteFile(ctx, p, []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		spec := runtime.ExecSpec{Argv: []string{"true"}, Timeout: time.Minute, MaxOutput: commands.MaxOutputBytes}
		on := spec
		on.Changes = true
		if res, err := sb.Exec(ctx, on); err != nil || res.Changes == nil {
			b.Fatalf("exec with changes: %v, changes %v", err, res.Changes)
		}
		measurePair(b, func() (func(), error) {
			_, err := sb.Exec(ctx, spec)
			return nil, err
		}, func() (func(), error) {
			_, err := sb.Exec(ctx, on)
			return nil, err
		})
	}
	b.Run("local", func(b *testing.B) {
		rt, err := local.New(local.Config{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: "node-1"})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		run(b, sb)
	})
	b.Run("docker-supervisor", func(b *testing.B) {
		_, rt, image := benchStack(b, 0, true, 0)
		sb, err := rt.Create(ctx, runtime.Spec{Tenant: "bench", SessionID: uuid.NewString(), Node: rt.Node(), Image: image, WorkspaceRoot: runtime.DefaultWorkspaceRoot})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		run(b, sb)
	})
}
