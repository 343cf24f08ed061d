package objectstore_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/testenv"
)

// tally is a hand-written ByteMeter: bytes by direction and kind.
type tally struct {
	mu sync.Mutex
	n  map[string]int64
}

func (t *tally) ObjectBytes(direction, kind string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n[direction+"/"+kind] += n
}

// TestMetered: a metered store counts the bytes of snapshot puts and
// fetches and of uploads and downloads, each under its kind; the store
// it was made from counts nothing.
func TestMetered(t *testing.T) {
	base := newStore(t)
	m := &tally{n: map[string]int64{}}
	st := base.Metered(m)
	ctx := testenv.Context(t, 30*time.Second)
	snapData := bytes.Repeat([]byte("s"), 300_000)
	snap, err := st.Put(ctx, "t", "s", "one", 1, bytes.NewReader(snapData), func() objectstore.Counts { return objectstore.Counts{} })
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "dl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := st.Fetch(ctx, "t", "s", "one", f); err != nil {
		t.Fatal(err)
	}
	upData := bytes.Repeat([]byte("u"), 70_000)
	name, err := st.Upload(ctx, "t", "up1", bytes.NewReader(upData))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Copy(ctx, name, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Copy(ctx, name, io.Discard); err != nil { // not metered
		t.Fatal(err)
	}
	want := map[string]int64{
		"in/snapshot": snap.Size, "out/snapshot": snap.Size,
		"in/transfer": int64(len(upData)), "out/transfer": int64(len(upData)),
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range want {
		if m.n[k] != v {
			t.Errorf("%s = %d bytes, want %d", k, m.n[k], v)
		}
	}
	if len(m.n) != len(want) {
		t.Errorf("counted %v, want only %v", m.n, want)
	}
}
