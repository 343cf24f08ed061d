package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// benchManifest returns a manifest of 10,000 files in 100 directories,
// one chunk each, as BenchmarkSnapshot's workspace has.
func benchManifest() *Manifest {
	m := &Manifest{Version: Version}
	for i := range 100 {
		m.Entries = append(m.Entries, Entry{Path: fmt.Sprintf("d%02d", i), Kind: KindDir, Mode: 0o755})
		for j := range 100 {
			m.Entries = append(m.Entries, Entry{Path: fmt.Sprintf("d%02d/f%04d", i, j), Kind: KindFile, Mode: 0o644, Size: 100 << 10,
				Chunks: []string{digestOf(fmt.Sprint(i, j))}})
		}
	}
	return m
}

// BenchmarkEncode measures the canonical encoding of a 10,000-file
// manifest (a persist encodes it for its root and to store it).
//
//	go test ./snapshot -run '^$' -bench Encode -benchtime 20x
func BenchmarkEncode(b *testing.B) {
	m := benchManifest()
	b.SetBytes(int64(len(m.Encode())))
	for b.Loop() {
		_ = m.Encode()
	}
}

// jsonOf is the encoding Encode must equal: json.Marshal of the manifest
// with its entries sorted ([] when none).
func jsonOf(t testing.TB, m *Manifest) []byte {
	t.Helper()
	c := Manifest{Version: Version, Entries: slices.Clone(m.Entries)}
	slices.SortStableFunc(c.Entries, cmpEntry)
	if c.Entries == nil {
		c.Entries = []Entry{}
	}
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEncodeIsEncodingJSON: Encode writes what json.Marshal writes, for
// manifests of every kind of entry and strings that need escaping.
func TestEncodeIsEncodingJSON(t *testing.T) {
	odd := []string{"plain", "quote\"d", `back\slash`, "\b\f\n\r\t", "\x00\x01\x1f\x7f", "<a>&b", "ünïcødé 日本",
		"\u2028\u2029", "bad\xffutf8\xc3", "\xed\xa0\x80", "emoji 😀", ""}
	m := &Manifest{Version: Version}
	for i, s := range odd {
		m.Entries = append(m.Entries,
			Entry{Path: fmt.Sprintf("p%02d%s", i, s), Kind: KindFile, Mode: 0o7777, Size: int64(i) * 12345678901, Chunks: []string{digestOf(s), digestOf(s + "x")}},
			Entry{Path: fmt.Sprintf("s%02d", i), Kind: KindSymlink, Mode: 0o777, Target: s},
			Entry{Path: fmt.Sprintf("d%02d", i), Kind: Kind(s), Mode: 0})
	}
	for _, mm := range []*Manifest{{}, {Version: 7, Entries: []Entry{}}, m, benchManifest()} {
		if got, want := mm.Encode(), jsonOf(t, mm); !bytes.Equal(got, want) {
			t.Fatalf("Encode differs from json.Marshal:\n got %s\nwant %s", got, want)
		}
	}
}

// FuzzEncode: for any path, kind, target, mode and size, Encode is
// json.Marshal's encoding.
func FuzzEncode(f *testing.F) {
	f.Add("a/b", "file", "t", uint32(0o644), int64(5))
	f.Add("\u2028<\xff", "dir", "\x00\"\\", uint32(0), int64(0))
	f.Fuzz(func(t *testing.T, p, kind, target string, mode uint32, size int64) {
		m := &Manifest{Entries: []Entry{{Path: p, Kind: Kind(kind), Mode: mode, Size: size, Target: target, Chunks: []string{target}}}}
		if got, want := m.Encode(), jsonOf(t, m); !bytes.Equal(got, want) {
			t.Fatalf("Encode differs from json.Marshal:\n got %q\nwant %q", got, want)
		}
	})
}

// BenchmarkEncodeJSON is BenchmarkEncode's baseline: json.Marshal of the
// same manifest, as Encode was written before.
func BenchmarkEncodeJSON(b *testing.B) {
	m := benchManifest()
	b.SetBytes(int64(len(m.Encode())))
	for b.Loop() {
		_ = jsonOf(b, m)
	}
}
