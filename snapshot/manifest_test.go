package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/errcode"
)

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sample is a valid manifest with every kind of entry.
func sample() *Manifest {
	return &Manifest{Version: Version, Entries: []Entry{
		{Path: "a", Kind: KindDir, Mode: 0o755},
		{Path: "a/big", Kind: KindFile, Mode: 0o644, Size: ChunkSize + 1, Chunks: []string{digestOf("x"), digestOf("y")}},
		{Path: "a/empty", Kind: KindFile, Mode: 0o600},
		{Path: "a/link", Kind: KindSymlink, Mode: 0o777, Target: "big"},
		{Path: "b\\c", Kind: KindFile, Mode: 0o4755, Size: 1, Chunks: []string{digestOf("y")}},
	}}
}

func TestEncodeIsCanonical(t *testing.T) {
	m := sample()
	shuffled := &Manifest{Entries: []Entry{m.Entries[3], m.Entries[0], m.Entries[4], m.Entries[2], m.Entries[1]}}
	if got, want := string(shuffled.Encode()), string(m.Encode()); got != want {
		t.Fatalf("encoding depends on entry order or version:\n got %s\nwant %s", got, want)
	}
	if shuffled.Entries[0].Path != "a/link" || shuffled.Version != 0 {
		t.Fatal("Encode changed the manifest it encoded")
	}
	if got := string((&Manifest{}).Encode()); got != `{"version":1,"entries":[]}` {
		t.Fatalf("empty manifest encodes as %s", got)
	}
	sum := sha256.Sum256(m.Encode())
	if m.Root() != hex.EncodeToString(sum[:]) {
		t.Fatal("Root is not the sha256 of Encode")
	}
	m2 := sample()
	m2.Entries[2].Mode = 0o644
	if m2.Root() == m.Root() {
		t.Fatal("a mode change left the root digest unchanged")
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	m := sample()
	got, err := Decode(m.Encode(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: got %+v, want %+v", got, m)
	}
	// Non-canonical but valid spellings decode to the same root.
	loose := `{"entries":[{"path":"a","kind":"dir","mode":493,"chunks":[]}],"version":1}` + "\n"
	lm, err := Decode([]byte(loose), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (&Manifest{Entries: []Entry{{Path: "a", Kind: KindDir, Mode: 0o755}}}).Root(); lm.Root() != want {
		t.Fatalf("root of a loose encoding %s, want %s", lm.Root(), want)
	}
}

func TestDecodeRefusesBadManifests(t *testing.T) {
	d := digestOf("x")
	enc := func(edit func(m *Manifest)) string {
		m := sample()
		edit(m)
		b, _ := json.Marshal(m) // not Encode: keep the order as edited
		return string(b)
	}
	cases := []struct {
		name string
		in   string
		code errcode.Code
	}{
		{"not json", `{`, errcode.InvalidRequest},
		{"trailing data", `{"version":1,"entries":[]} {}`, errcode.InvalidRequest},
		{"unknown field", `{"version":1,"entries":[],"x":1}`, errcode.InvalidRequest},
		{"unknown entry field", `{"version":1,"entries":[{"path":"a","kind":"dir","uid":0}]}`, errcode.InvalidRequest},
		{"version 0", `{"entries":[]}`, errcode.InvalidRequest},
		{"version 2", `{"version":2,"entries":[]}`, errcode.InvalidRequest},
		{"unsorted", enc(func(m *Manifest) { m.Entries[3], m.Entries[4] = m.Entries[4], m.Entries[3] }), errcode.InvalidRequest},
		{"repeated", enc(func(m *Manifest) { m.Entries[2] = m.Entries[1] }), errcode.InvalidRequest},
		{"empty path", enc(func(m *Manifest) { m.Entries = []Entry{{Path: "", Kind: KindDir}} }), errcode.InvalidRequest},
		{"dot", enc(func(m *Manifest) { m.Entries = []Entry{{Path: ".", Kind: KindDir}} }), errcode.InvalidRequest},
		{"dotdot", enc(func(m *Manifest) { m.Entries = []Entry{{Path: "..", Kind: KindDir}} }), errcode.InvalidRequest},
		{"climbs", enc(func(m *Manifest) { m.Entries = []Entry{{Path: "../x", Kind: KindDir}} }), errcode.InvalidRequest},
		{"absolute", enc(func(m *Manifest) { m.Entries = []Entry{{Path: "/etc", Kind: KindDir}} }), errcode.InvalidRequest},
		{"unclean", enc(func(m *Manifest) { m.Entries[4].Path = "a//x" }), errcode.InvalidRequest},
		{"trailing slash", enc(func(m *Manifest) { m.Entries[4].Path = "c/" }), errcode.InvalidRequest},
		{"inner dotdot", enc(func(m *Manifest) { m.Entries[4].Path = "a/../c" }), errcode.InvalidRequest},
		{"NUL", `{"version":1,"entries":[{"path":"a\u0000b","kind":"dir"}]}`, errcode.InvalidRequest},
		{"orphan", enc(func(m *Manifest) { m.Entries = m.Entries[1:] }), errcode.InvalidRequest},
		{"parent is a file", `{"version":1,"entries":[{"path":"a","kind":"file","mode":420},{"path":"a/b","kind":"dir"}]}`, errcode.InvalidRequest},
		{"parent is a symlink", `{"version":1,"entries":[{"path":"a","kind":"symlink","target":"/"},{"path":"a/b","kind":"dir"}]}`, errcode.InvalidRequest},
		{"unknown kind", enc(func(m *Manifest) { m.Entries[0].Kind = "fifo" }), errcode.InvalidRequest},
		{"mode", enc(func(m *Manifest) { m.Entries[2].Mode = 0o10000 }), errcode.InvalidRequest},
		{"negative size", enc(func(m *Manifest) { m.Entries[2].Size = -1 }), errcode.InvalidRequest},
		{"too few chunks", enc(func(m *Manifest) { m.Entries[1].Chunks = m.Entries[1].Chunks[:1] }), errcode.InvalidRequest},
		{"too many chunks", enc(func(m *Manifest) { m.Entries[2].Chunks = []string{d} }), errcode.InvalidRequest},
		{"upper hex", enc(func(m *Manifest) { m.Entries[4].Chunks[0] = strings.ToUpper(d) }), errcode.InvalidRequest},
		{"short digest", enc(func(m *Manifest) { m.Entries[4].Chunks[0] = d[:63] }), errcode.InvalidRequest},
		{"digest path", enc(func(m *Manifest) { m.Entries[4].Chunks[0] = "../../../../etc/passwd" + d[:42] }), errcode.InvalidRequest},
		{"file target", enc(func(m *Manifest) { m.Entries[2].Target = "x" }), errcode.InvalidRequest},
		{"symlink without target", enc(func(m *Manifest) { m.Entries[3].Target = "" }), errcode.InvalidRequest},
		{"symlink with size", enc(func(m *Manifest) { m.Entries[3].Size = 1; m.Entries[3].Chunks = []string{d} }), errcode.InvalidRequest},
		{"symlink NUL target", `{"version":1,"entries":[{"path":"a","kind":"symlink","target":"x\u0000"}]}`, errcode.InvalidRequest},
		{"dir with size", enc(func(m *Manifest) { m.Entries[0].Size = 1 }), errcode.InvalidRequest},
		{"dir with target", enc(func(m *Manifest) { m.Entries[0].Target = "x" }), errcode.InvalidRequest},
		{"number as path", `{"version":1,"entries":[{"path":1,"kind":"dir"}]}`, errcode.InvalidRequest},
		{"huge size", enc(func(m *Manifest) { m.Entries[2].Size = 1 << 62 }), errcode.PayloadTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Decode([]byte(c.in), Limits{})
			if got := errcode.Of(err); got != c.code {
				t.Fatalf("Decode(%s): got %v (%v), want %s", c.in, got, err, c.code)
			}
			if m != nil {
				t.Fatal("a refused manifest was returned")
			}
		})
	}
}

func TestDecodeLimits(t *testing.T) {
	m := sample()
	b := m.Encode()
	if _, err := Decode(b, Limits{MaxEntries: 4}); errcode.Of(err) != errcode.PayloadTooLarge {
		t.Fatalf("5 entries under a limit of 4: got %v, want payload_too_large", err)
	}
	if _, err := Decode(b, Limits{MaxBytes: ChunkSize + 1}); errcode.Of(err) != errcode.PayloadTooLarge {
		t.Fatalf("%d bytes under a limit of %d: got %v, want payload_too_large", ChunkSize+2, ChunkSize+1, err)
	}
	if _, err := Decode(b, Limits{MaxBytes: ChunkSize + 2, MaxEntries: 5}); err != nil {
		t.Fatalf("at the limits: %v", err)
	}
	// Input longer than MaxEntries KiB is refused before it is parsed.
	big := append([]byte(`{"version":1,"entries":[]}`), bytes.Repeat([]byte(" "), 2<<10)...)
	if _, err := Decode(big, Limits{MaxEntries: 2}); errcode.Of(err) != errcode.PayloadTooLarge {
		t.Fatalf("2 KiB of input for 2 entries: got %v, want payload_too_large", err)
	}
}

func TestStatsChunkSetLookup(t *testing.T) {
	m := sample()
	files, entries, n := m.Stats()
	if files != 3 || entries != 5 || n != ChunkSize+2 {
		t.Fatalf("Stats: got %d files, %d entries, %d bytes; want 3, 5, %d", files, entries, n, ChunkSize+2)
	}
	want := map[string]int64{digestOf("x"): ChunkSize, digestOf("y"): 1}
	if set := m.ChunkSet(); !reflect.DeepEqual(set, want) {
		t.Fatalf("ChunkSet: got %v, want %v", set, want)
	}
	if e, ok := m.Lookup("a/link"); !ok || e.Target != "big" {
		t.Fatalf("Lookup(a/link): got %+v, %v", e, ok)
	}
	if _, ok := m.Lookup("a/nope"); ok {
		t.Fatal("Lookup found a path that is not there")
	}
}

func TestDiff(t *testing.T) {
	from := sample()
	to := sample()
	to.Entries[1].Chunks = []string{digestOf("x"), digestOf("z")} // content
	to.Entries[2].Mode = 0o644                                    // mode
	to.Entries[3] = Entry{Path: "a/link", Kind: KindFile, Mode: 0o644}
	to.Entries = append(to.Entries[:4], Entry{Path: "c", Kind: KindDir, Mode: 0o755}) // b\c removed, c created
	got := Diff(from, to)
	want := []Change{
		{"a/big", KindFile, Modified},
		{"a/empty", KindFile, Modified},
		{"a/link", KindFile, Modified},
		{"b\\c", KindFile, Removed},
		{"c", KindDir, Created},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Diff:\n got %v\nwant %v", got, want)
	}
	if d := Diff(from, sample()); len(d) != 0 {
		t.Fatalf("Diff of equal manifests: %v", d)
	}
	if d := Diff(nil, from); len(d) != 5 || d[0].Change != Created {
		t.Fatalf("Diff from nothing: %v", d)
	}
	if d := Diff(from, nil); len(d) != 5 || d[4].Change != Removed || d[4].Path != "b\\c" {
		t.Fatalf("Diff to nothing: %v", d)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(sample().Encode())
	f.Add([]byte(`{"version":1,"entries":[]}`))
	f.Add([]byte(`{"version":1,"entries":[{"path":"a","kind":"symlink","target":"../x","mode":511}]}`))
	f.Add([]byte(`{"version":1,"entries":[{"path":"../a","kind":"dir"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b, Limits{MaxEntries: 1000})
		if err != nil {
			if c := errcode.Of(err); c != errcode.InvalidRequest && c != errcode.PayloadTooLarge {
				t.Fatalf("Decode error with code %s: %v", c, err)
			}
			return
		}
		enc := m.Encode()
		m2, err := Decode(enc, Limits{MaxEntries: 1000})
		if err != nil {
			t.Fatalf("the encoding of an accepted manifest is refused: %v\n%s", err, enc)
		}
		if !reflect.DeepEqual(m, m2) || !bytes.Equal(m2.Encode(), enc) || m2.Root() != m.Root() {
			t.Fatalf("round trip changed the manifest:\n%s\n%s", enc, m2.Encode())
		}
	})
}
