//go:build linux

package changes_test

import (
	"context"
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime/changes"
)

// BenchmarkWindow measures an empty attribution window: Begin, End
// (two fences, the read of their events).
//
//	go test -run '^$' -bench BenchmarkWindow ./nodes/runtime/changes/
func BenchmarkWindow(b *testing.B) {
	w, err := changes.Start(changes.Config{Root: b.TempDir(), FenceDir: "/dev/shm"})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	for b.Loop() {
		if c := w.End(ctx, w.Begin()); c.Truncated {
			b.Fatal("truncated")
		}
	}
}
