package runtime_test

import (
	"path"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

func TestRel(t *testing.T) {
	for _, tc := range []struct {
		root, p string
		want    string // "" when the path is invalid
	}{
		{"", "", "."},
		{"", ".", "."},
		{"", "./a/", "a"},
		{"", "a/../b", "b"},
		{"", "a//b", "a/b"},
		{"", "/workspace", "."},
		{"", "/workspace/", "."},
		{"", "/workspace/a", "a"},
		{"", "/workspace/a/../b", "b"},
		{"", "..foo", "..foo"},
		{"", "/workspacex/a", ""},
		{"", "/workspace/../etc", ""},
		{"", "/etc", ""},
		{"", "/", ""},
		{"", "..", ""},
		{"", "../a", ""},
		{"", "a/../../b", ""},
		{"", "x\x00y", ""},
		{"/home/w/", "/home/w/a", "a"},
		{"/home/w", "/workspace/a", ""},
		// NAME_MAX per component, PATH_MAX less the NUL under the root.
		{"", strings.Repeat("n", 255), strings.Repeat("n", 255)},
		{"", "a/" + strings.Repeat("n", 256) + "/b", ""},
		{"", "/workspace/" + strings.Repeat("n", 300), ""},
		{"", strings.Repeat("n", 300) + "/..", "."},
		{"", strings.Repeat("abcdefghi/", 408) + "abcd", strings.Repeat("abcdefghi/", 408) + "abcd"}, // 4084 bytes: 4095 with "/workspace/"
		{"", strings.Repeat("abcdefghi/", 408) + "abcde", ""},
		{"", strings.Repeat("abcdefghi/", 500), ""},
		{"/w", strings.Repeat("abcdefghi/", 409) + "ab", strings.Repeat("abcdefghi/", 409) + "ab"},
	} {
		got, err := runtime.Rel(tc.root, tc.p)
		if tc.want == "" {
			if errcode.Of(err) != errcode.InvalidPath {
				t.Errorf("Rel(%q, %q): got %q, %v, want an invalid_path error", tc.root, tc.p, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Rel(%q, %q): got %q, %v, want %q, nil", tc.root, tc.p, got, err, tc.want)
		}
	}
}

func FuzzRel(f *testing.F) {
	for _, p := range []string{"", ".", "a/../b", "/workspace", "/workspace/a", "/workspacex/a", "/etc", "..", "a/../../b", "x\x00y", "..foo/../..", "/workspace/../.."} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := runtime.Rel(runtime.DefaultWorkspaceRoot, p)
		if err != nil {
			if errcode.Of(err) != errcode.InvalidPath {
				t.Fatalf("Rel(%q): got error %v, want invalid_path", p, err)
			}
			return
		}
		if got == ".." || strings.HasPrefix(got, "../") || strings.HasPrefix(got, "/") {
			t.Fatalf("Rel(%q) = %q leaves the root", p, got)
		}
		if len(got) > runtime.MaxPathBytes {
			t.Fatalf("Rel(%q) = %d bytes, over the limit", p, len(got))
		}
		if got != path.Clean(got) || strings.ContainsRune(got, 0) {
			t.Fatalf("Rel(%q) = %q is not clean", p, got)
		}
	})
}
