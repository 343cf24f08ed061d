package nodes

import (
	"archive/tar"
	"bytes"
	"testing"
	"time"
)

// TestTarContentSum: the digest ignores members' times and sees every
// change of a name, mode, owner, link target or byte.
func TestTarContentSum(t *testing.T) {
	type member struct {
		name, body, link string
		mode             int64
		uid              int
		typ              byte
	}
	base := []member{
		{name: "./", mode: 0o755, typ: tar.TypeDir},
		{name: "./a.txt", body: "hello", mode: 0o644, typ: tar.TypeReg},
		{name: "./l", link: "a.txt", mode: 0o777, typ: tar.TypeSymlink},
	}
	build := func(ms []member, mtime time.Time) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, m := range ms {
			h := &tar.Header{Name: m.name, Mode: m.mode, Uid: m.uid, Typeflag: m.typ, Linkname: m.link, Size: int64(len(m.body)), ModTime: mtime, Format: tar.FormatPAX}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(m.body)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	sum := func(b []byte) string {
		s, err := tarContentSum(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t0 := time.Unix(1_700_000_000, 0)
	want := sum(build(base, t0))
	if got := sum(build(base, t0.Add(time.Hour))); got != want {
		t.Errorf("the same members an hour later: %s, want %s", got, want)
	}
	for name, change := range map[string]func(ms []member){
		"a byte":       func(ms []member) { ms[1].body = "hellO" },
		"a mode":       func(ms []member) { ms[1].mode = 0o600 },
		"an owner":     func(ms []member) { ms[1].uid = 1000 },
		"a name":       func(ms []member) { ms[1].name = "./b.txt" },
		"a link":       func(ms []member) { ms[2].link = "b.txt" },
		"a dir's mode": func(ms []member) { ms[0].mode = 0o700 },
	} {
		ms := append([]member(nil), base...)
		change(ms)
		if got := sum(build(ms, t0)); got == want {
			t.Errorf("changing %s left the digest %s", name, got)
		}
	}
	if _, err := tarContentSum(bytes.NewReader([]byte("not a tar at all, but long enough to be read as a header block........................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................"))); err == nil {
		t.Error("a stream that is not a tar has a digest")
	}
}
