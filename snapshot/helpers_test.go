package snapshot

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/paddock-dev/paddock/errcode"
)

// content returns n bytes that differ from any other seed's.
func content(seed uint64, n int) []byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// mkfile writes a file (making its parents) with mode.
func mkfile(t testing.TB, dir, rel string, data []byte, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// testTree builds the tree the round-trip tests use: files of 0, 1,
// ChunkSize-1, ChunkSize and 3*ChunkSize+5 bytes, nested directories, a
// 0555 directory, a symlink, files of mode 0600 and 0755.
func testTree(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	mkfile(t, dir, "empty", nil, 0o644)
	mkfile(t, dir, "one", []byte("1"), 0o600)
	mkfile(t, dir, "a/below", content(1, ChunkSize-1), 0o644)
	mkfile(t, dir, "a/b/exact", content(2, ChunkSize), 0o755)
	mkfile(t, dir, "a/b/c/big", content(3, 3*ChunkSize+5), 0o644)
	mkfile(t, dir, "a/b/c/same-as-exact", content(2, ChunkSize), 0o644)
	mkfile(t, dir, "ro/inside", []byte("read-only dir"), 0o644)
	if err := os.Mkdir(filepath.Join(dir, "emptydir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a/b/exact", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	return dir
}

// chunkStore is an in-memory chunk store for FromTar and WriteTar.
type chunkStore struct {
	mu     sync.Mutex
	chunks map[string][]byte
	puts   int
}

func newChunkStore() *chunkStore { return &chunkStore{chunks: map[string][]byte{}} }

func (s *chunkStore) put(d string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	s.chunks[d] = bytes.Clone(data)
	return nil
}

func (s *chunkStore) get(_ context.Context, d string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, ok := s.chunks[d]
	if !ok {
		return nil, errcode.New(errcode.NotFound, "no chunk %s", d)
	}
	return data, nil
}

func mustScan(t testing.TB, dir string, cache *HashCache) *Scanned {
	t.Helper()
	s, err := Scan(context.Background(), dir, nil, cache)
	if err != nil {
		t.Fatalf("scan %s: %v", dir, err)
	}
	return s
}
