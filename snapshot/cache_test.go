package snapshot

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

func chunk(i int) (string, []byte) {
	data := content(uint64(1000+i), 1000)
	return digestOf(string(data)), data
}

func TestCacheGetPut(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenCache(dir, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	d, data := chunk(1)
	if _, ok := c.Get("acme", d); ok || c.Has("acme", d) {
		t.Fatal("an empty cache has a chunk")
	}
	if err := c.Put("acme", d, data); err != nil {
		t.Fatal(err)
	}
	got, ok := c.Get("acme", d)
	if !ok || !bytes.Equal(got, data) || !c.Has("acme", d) {
		t.Fatal("Get after Put missed")
	}
	if _, err := os.Stat(filepath.Join(dir, "acme", d[:2], d)); err != nil {
		t.Fatalf("layout: %v", err)
	}
	// Tenants do not share chunks.
	if _, ok := c.Get("other", d); ok || c.Has("other", d) {
		t.Fatal("another tenant got acme's chunk")
	}
	if err := c.Put("acme", d, data); err != nil { // again: no double count
		t.Fatal(err)
	}
	if n, b := c.Stats(); n != 1 || b != 1000 {
		t.Fatalf("stats %d chunks, %d bytes; want 1, 1000", n, b)
	}
	// Data that is not its digest is refused and not stored.
	d2, _ := chunk(2)
	if err := c.Put("acme", d2, data); errcode.Of(err) != errcode.Internal {
		t.Fatalf("Put of data under another digest: got %v, want internal", err)
	}
	if c.Has("acme", d2) {
		t.Fatal("a refused chunk was stored")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "acme", d[:2]))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Fatalf("a temporary file was left: %s", e.Name())
		}
	}
}

func TestCacheBadNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := OpenCache(dir, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	d, data := chunk(1)
	// A file outside the cache a bad name would reach.
	outside := filepath.Join(filepath.Dir(dir), "victim")
	if err := os.WriteFile(outside, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ tenant, digest string }{
		{"", d}, {"..", d}, {"a/b", d}, {"a.b", d}, {"*", d}, {"a b", d}, {"../..", d},
		{"acme", ""}, {"acme", "../victim"}, {"acme", strings.ToUpper(d)}, {"acme", d[:63]}, {"acme", d + "0"},
		{"acme", "../../../" + d[9:]},
	}
	for _, k := range cases {
		if err := c.Put(k.tenant, k.digest, data); errcode.Of(err) != errcode.InvalidRequest {
			t.Errorf("Put(%q, %q): got %v, want invalid_request", k.tenant, k.digest, err)
		}
		if _, ok := c.Get(k.tenant, k.digest); ok || c.Has(k.tenant, k.digest) {
			t.Errorf("Get(%q, %q) hit", k.tenant, k.digest)
		}
	}
	if got, err := os.ReadFile(outside); err != nil || !bytes.Equal(got, data) {
		t.Fatal("a bad name touched a file outside the cache")
	}
	var files []string
	_ = filepath.WalkDir(filepath.Dir(dir), func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 1 {
		t.Fatalf("bad names wrote files: %v", files)
	}
}

func TestCacheCorruption(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenCache(dir, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	d, data := chunk(1)
	if err := c.Put("acme", d, data); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "acme", d[:2], d)
	bad := bytes.Clone(data)
	bad[10] ^= 0xff
	if err := os.WriteFile(p, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("acme", d); ok {
		t.Fatal("a corrupt chunk was served")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the corrupt file was kept: %v", err)
	}
	if n, b := c.Stats(); n != 0 || b != 0 || c.Has("acme", d) {
		t.Fatalf("a removed chunk is still counted: %d, %d", n, b)
	}
	// It can be put again.
	if err := c.Put("acme", d, data); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Get("acme", d); !ok || !bytes.Equal(got, data) {
		t.Fatal("Get after the re-put missed")
	}
}

// TestCacheEvictionAndReopen: least recently used (put or got) goes
// first, and a reopened cache keeps that order.
func TestCacheEvictionAndReopen(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenCache(dir, 3000) // three 1000-byte chunks
	if err != nil {
		t.Fatal(err)
	}
	var ds []string
	for i := range 3 {
		d, data := chunk(i)
		ds = append(ds, d)
		if err := c.Put("acme", d, data); err != nil {
			t.Fatal(err)
		}
		// Recency is the files' mtime on reopen: give each its own.
		mt := time.Now().Add(time.Duration(i-10) * time.Second)
		_ = os.Chtimes(filepath.Join(dir, "acme", d[:2], d), mt, mt)
	}
	if _, ok := c.Get("acme", ds[0]); !ok { // 0 is now the most recent
		t.Fatal("miss")
	}
	d3, data3 := chunk(3)
	if err := c.Put("acme", d3, data3); err != nil {
		t.Fatal(err)
	}
	if c.Has("acme", ds[1]) || !c.Has("acme", ds[0]) || !c.Has("acme", ds[2]) || !c.Has("acme", d3) {
		t.Fatal("eviction did not take the least recently used (1)")
	}
	if _, err := os.Stat(filepath.Join(dir, "acme", ds[1][:2], ds[1])); !os.IsNotExist(err) {
		t.Fatal("the evicted chunk's file is still there")
	}
	if n, b := c.Stats(); n != 3 || b != 3000 {
		t.Fatalf("stats %d, %d; want 3, 3000", n, b)
	}
	// Reopen smaller, with litter: a temp file and a stray name. Oldest
	// by mtime is 2 (0 and 3 were touched now), so it goes.
	litter := filepath.Join(dir, "acme", "zz", ".tmp-123")
	_ = os.MkdirAll(filepath.Dir(litter), 0o700)
	_ = os.WriteFile(litter, []byte("half"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "stray"), []byte("x"), 0o600)
	c2, err := OpenCache(dir, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if n, b := c2.Stats(); n != 2 || b != 2000 {
		t.Fatalf("reopened stats %d, %d; want 2, 2000", n, b)
	}
	if c2.Has("acme", ds[2]) || !c2.Has("acme", ds[0]) || !c2.Has("acme", d3) {
		t.Fatal("reopen evicted the wrong chunk")
	}
	for _, p := range []string{litter, filepath.Join(dir, "stray")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s was left on reopen", p)
		}
	}
	// A chunk bigger than the whole cache is not stored.
	big := content(9, 3000)
	if err := c2.Put("acme", digestOf(string(big)), big); err != nil || c2.Has("acme", digestOf(string(big))) {
		t.Fatalf("an oversized chunk: %v", err)
	}
}

func TestCacheDisabled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	c, err := OpenCache(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	d, data := chunk(1)
	if err := c.Put("acme", d, data); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("acme", d); ok || c.Has("acme", d) {
		t.Fatal("a disabled cache hit")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("a disabled cache made its directory")
	}
	if err := c.Put("a/b", d, data); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("a disabled cache still checks names: got %v", err)
	}
}

// TestCachePutVerified: PutVerified stores without hashing, so bytes that
// are not the digest's (a caller's bug) are still never served: Get
// checks, drops the file and misses. Bad names are refused as by Put.
func TestCachePutVerified(t *testing.T) {
	c, err := OpenCache(t.TempDir(), 10_000)
	if err != nil {
		t.Fatal(err)
	}
	d, data := chunk(1)
	if err := c.PutVerified("acme", d, data); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Get("acme", d); !ok || !bytes.Equal(got, data) {
		t.Fatal("Get after PutVerified missed")
	}
	d2, _ := chunk(2)
	if err := c.PutVerified("acme", d2, data); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("acme", d2); ok {
		t.Fatal("bytes put under another digest were served")
	}
	if err := c.PutVerified("a/b", d, data); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("bad tenant: %v", err)
	}
}
