package docker_test

import (
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime/docker"
)

func TestParseListing(t *testing.T) {
	for _, tc := range []struct {
		in    string
		names []string
		fail  bool
	}{
		{"", nil, false},
		{"a\x00b\nc\x00\x0081a4 3 1700000000\n41ed 4096 1700000000\n", []string{"a", "b\nc"}, false},
		{"a\x00\x0081a4 3 1\n.x\x00\x00a1ff 1 2\n", []string{"a", ".x"}, false},
		{"a\x00\x00", nil, true},                       // a stat line missing
		{"a\x00\x0081a4 3\n", nil, true},               // a short line
		{"a\x00\x00zz 3 1\n", nil, true},               // not hex
		{"a/b\x00\x0081a4 3 1\n", nil, true},           // a slash
		{"..\x00\x0041ed 3 1\n", nil, true},            // dot-dot
		{"a", nil, true},                               // unterminated
		{"a\x00\x0081a4 3 1\nextra", nil, true},        // trailing garbage
		{"a\x00\x0081a4 3 1 junk\n", nil, true},        // a long line
		{"a\x00\x0081a4 -3 1\n", []string{"a"}, false}, // stat's numbers are taken as they come
	} {
		entries, err := docker.ParseListing([]byte(tc.in))
		if (err != nil) != tc.fail {
			t.Errorf("ParseListing(%q): got %+v, %v; want failure %v", tc.in, entries, err, tc.fail)
			continue
		}
		for i, n := range tc.names {
			if i >= len(entries) || entries[i].Name != n {
				t.Errorf("ParseListing(%q): got %+v, want names %q", tc.in, entries, tc.names)
			}
		}
	}
	entries, _ := docker.ParseListing([]byte("f\x00d\x00l\x00p\x00\x0081a4 3 1700000000\n41ed 4096 1700000001\na1ff 1 2\n11a4 0 3\n"))
	var got []string
	for _, e := range entries {
		got = append(got, e.Type)
	}
	if strings.Join(got, ",") != "file,dir,symlink,other" || entries[0].Mode != 0o644 || entries[1].Mode != 0o755 || entries[0].Size != 3 || entries[1].ModTime.Unix() != 1700000001 {
		t.Errorf("types, modes, sizes, times: got %+v", entries)
	}
}

// FuzzParseListing: whatever a (hostile) container prints, the parser
// returns only plain names, never panics.
func FuzzParseListing(f *testing.F) {
	f.Add([]byte("a\x00b\nc\x00\x0081a4 3 1700000000\n41ed 4096 1700000000\n"))
	f.Add([]byte("\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := docker.ParseListing(b)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Name == "" || e.Name == "." || e.Name == ".." || strings.Contains(e.Name, "/") {
				t.Fatalf("ParseListing(%q) gave the name %q", b, e.Name)
			}
		}
	})
}
