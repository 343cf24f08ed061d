package nodes

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestChunkFlights: restores that want a chunk at once share one fetch;
// one that joined a fetch that failed fetches by itself.
func TestChunkFlights(t *testing.T) {
	var f chunkFlights
	var calls atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	fetch := func(context.Context) ([]byte, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-release
		return []byte("chunk"), nil
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	got := make([][]byte, 8)
	wg.Add(1)
	go func() { defer wg.Done(); got[0], _ = f.get(ctx, "t/d", fetch) }()
	<-started
	for i := 1; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = f.get(ctx, "t/d", fetch) }()
	}
	// Release the fetch once the 7 others joined it (polled, no sleep).
	for {
		f.mu.Lock()
		n := f.m["t/d"].joined
		f.mu.Unlock()
		if n == 7 {
			break
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	for i, b := range got {
		if string(b) != "chunk" {
			t.Fatalf("caller %d got %q", i, b)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d fetches for 8 callers at once, want 1", n)
	}

	// A failed flight: the follower fetches by itself.
	fail := make(chan struct{})
	leaderIn := make(chan struct{})
	var second atomic.Int32
	go func() {
		_, _ = f.get(ctx, "t/e", func(context.Context) ([]byte, error) {
			close(leaderIn)
			<-fail
			return nil, errors.New("store unavailable")
		})
	}()
	<-leaderIn
	done := make(chan []byte)
	go func() {
		b, _ := f.get(ctx, "t/e", func(context.Context) ([]byte, error) { second.Add(1); return []byte("own"), nil })
		done <- b
	}()
	close(fail)
	if b := <-done; string(b) != "own" || second.Load() != 1 {
		t.Fatalf("follower of a failed flight got %q after %d fetches of its own, want its own", b, second.Load())
	}
}
