package archive_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
)

type member struct {
	name, link string
	typ        byte
	data       string
	mode       int64
}

func tarOf(t *testing.T, ms ...member) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		mode := m.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: m.typ, Mode: mode, Size: int64(len(m.data))}
		if m.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if m.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(m.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func openRoot(t *testing.T) (*os.Root, string) {
	t.Helper()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

// TestBadArchives: each hostile archive is refused with invalid_archive by
// Check, and Extract writes nothing outside the workspace.
func TestBadArchives(t *testing.T) {
	reg := func(name, data string) member { return member{name: name, typ: tar.TypeReg, data: data} }
	for _, tc := range []struct {
		name string
		ms   []member
		lim  archive.Limits
	}{
		{"dotdot", []member{reg("../evil", "x")}, archive.Limits{}},
		{"nested dotdot", []member{reg("a/../../evil", "x")}, archive.Limits{}},
		{"absolute", []member{reg("/etc/evil", "x")}, archive.Limits{}},
		{"symlink out then through", []member{{name: "l", typ: tar.TypeSymlink, link: "../.."}, reg("l/evil", "x")}, archive.Limits{}},
		{"absolute symlink", []member{{name: "l", typ: tar.TypeSymlink, link: "/etc"}}, archive.Limits{}},
		{"member under in-workspace symlink", []member{{name: "d", typ: tar.TypeDir}, {name: "l", typ: tar.TypeSymlink, link: "d"}, reg("l/x", "x")}, archive.Limits{}},
		{"hardlink outside", []member{{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}}, archive.Limits{}},
		{"hardlink to nothing", []member{{name: "h", typ: tar.TypeLink, link: "missing"}}, archive.Limits{}},
		{"char device", []member{{name: "dev", typ: tar.TypeChar}}, archive.Limits{}},
		{"fifo", []member{{name: "fifo", typ: tar.TypeFifo}}, archive.Limits{}},
		{"too many members", []member{reg("a", ""), reg("b", ""), reg("c", "")}, archive.Limits{MaxMembers: 2}},
		{"too many bytes", []member{reg("a", "0123456789"), reg("b", "0123456789")}, archive.Limits{MaxExtractedBytes: 15}},
		{"archive too large", []member{reg("a", "0123456789")}, archive.Limits{MaxArchiveBytes: 600}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := tarOf(t, tc.ms...)
			if _, err := archive.Check(bytes.NewReader(data), tc.lim); errcode.Of(err) != errcode.InvalidArchive {
				t.Fatalf("Check: got %v, want invalid_archive", err)
			}
			root, dir := openRoot(t)
			if _, err := archive.Extract(root, bytes.NewReader(data), tc.lim); errcode.Of(err) != errcode.InvalidArchive {
				t.Fatalf("Extract: got %v, want invalid_archive", err)
			}
			for _, p := range []string{"evil", "../evil"} {
				if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s exists outside the workspace", p)
				}
			}
		})
	}
}

// TestRootEntry: the "./" member `tar -C dir .` writes is skipped, and
// "./"-prefixed names are taken as workspace-relative.
func TestRootEntry(t *testing.T) {
	data := tarOf(t, member{name: "./", typ: tar.TypeDir, mode: 0o755}, member{name: "./docs/", typ: tar.TypeDir, mode: 0o755},
		member{name: "./docs/readme.txt", typ: tar.TypeReg, data: "hello\n"})
	root, _ := openRoot(t)
	st, err := archive.Extract(root, bytes.NewReader(data), archive.Limits{})
	if err != nil || st.Members != 2 {
		t.Fatalf("Extract = %+v, %v", st, err)
	}
	if got, err := root.ReadFile("docs/readme.txt"); err != nil || string(got) != "hello\n" {
		t.Fatalf("readme = %q, %v", got, err)
	}
}

// TestTruncatedArchive: an archive cut short is invalid, not a panic.
func TestTruncatedArchive(t *testing.T) {
	data := tarOf(t, member{name: "a", typ: tar.TypeReg, data: string(make([]byte, 4096))})
	if _, err := archive.Check(bytes.NewReader(data[:1000]), archive.Limits{}); errcode.Of(err) != errcode.InvalidArchive {
		t.Fatalf("Check of a truncated archive: %v", err)
	}
}

// TestRoundTrip: WriteDir then Extract keeps contents, empty files,
// nested directories, modes and internal symlinks, and skips what Skip
// names.
func TestRoundTrip(t *testing.T) {
	src, _ := openRoot(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(src.MkdirAll("a/b/c", 0o755))
	must(src.WriteFile("a/b/c/deep.txt", []byte("deep"), 0o644))
	must(src.WriteFile("empty", nil, 0o600))
	must(src.WriteFile("run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(src.Chmod("run.sh", 0o755))
	must(src.Symlink("a/b/c/deep.txt", "link"))
	must(src.MkdirAll("cache/x", 0o755))
	must(src.WriteFile("cache/x/big", []byte("skip me"), 0o644))

	var buf bytes.Buffer
	st, err := archive.WriteDir(&buf, src, func(rel string) bool { return rel == "cache" })
	must(err)
	if st.Members != 7 || st.Skipped != 1 || st.Bytes != int64(len("deep")+len("#!/bin/sh\necho hi\n")) {
		t.Fatalf("stats = %+v", st)
	}
	dst, _ := openRoot(t)
	if _, err := archive.Extract(dst, bytes.NewReader(buf.Bytes()), archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a/b/c/deep.txt": "deep", "empty": "", "run.sh": "#!/bin/sh\necho hi\n", "link": "deep"} {
		got, err := dst.ReadFile(name)
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if fi, err := dst.Stat("run.sh"); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh mode = %v, %v", fi.Mode(), err)
	}
	if fi, err := dst.Stat("empty"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("empty mode = %v, %v", fi.Mode(), err)
	}
	if l, err := dst.Readlink("link"); err != nil || l != "a/b/c/deep.txt" {
		t.Errorf("link = %q, %v", l, err)
	}
	if _, err := dst.Stat("cache"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("skipped cache was extracted: %v", err)
	}
}

// TestRebase: Docker's "<dir>/..." members become workspace-relative.
func TestRebase(t *testing.T) {
	in := tarOf(t,
		member{name: "workspace/", typ: tar.TypeDir},
		member{name: "workspace/f", typ: tar.TypeReg, data: "x"},
		member{name: "workspace/h", typ: tar.TypeLink, link: "workspace/f"},
		member{name: "workspace/tmp/", typ: tar.TypeDir},
		member{name: "workspace/tmp/t", typ: tar.TypeReg, data: "t"},
		member{name: "workspace/fifo", typ: tar.TypeFifo},
	)
	var out bytes.Buffer
	st, err := archive.Rebase(&out, bytes.NewReader(in), func(rel string) bool { return rel == "tmp" })
	if err != nil || st.Members != 2 || st.Skipped != 3 {
		t.Fatalf("Rebase = %+v, %v", st, err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name+">"+h.Linkname)
	}
	if len(names) != 2 || names[0] != "f>" || names[1] != "h>f" {
		t.Fatalf("members = %v", names)
	}
}

// TestCopyUnder: the checked members move under one directory, written
// first and owned like them; hardlink targets move too, symlink targets
// (relative to their link) do not; the result extracts to the same tree
// one level down, and checks and stats are CopyAs's.
func TestCopyUnder(t *testing.T) {
	in := tarOf(t,
		member{name: "./", typ: tar.TypeDir},
		member{name: "d/", typ: tar.TypeDir, mode: 0o555},
		member{name: "d/f", typ: tar.TypeReg, data: "data"},
		member{name: "h", typ: tar.TypeLink, link: "d/f"},
		member{name: "l", typ: tar.TypeSymlink, link: "d/f"},
	)
	var out bytes.Buffer
	st, err := archive.CopyUnder(&out, bytes.NewReader(in), archive.Limits{}, 7, 8, ".hold/staging-x")
	if err != nil {
		t.Fatal(err)
	}
	if st.Members != 4 || st.Bytes != 4 { // the directories CopyUnder adds are not the archive's
		t.Errorf("stats = %+v, want 4 members of 4 bytes", st)
	}
	type row struct {
		name, link string
		typ        byte
		mode       int64
		uid, gid   int
	}
	var got []row
	tr := tar.NewReader(bytes.NewReader(out.Bytes()))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, row{h.Name, h.Linkname, h.Typeflag, h.Mode, h.Uid, h.Gid})
	}
	want := []row{
		{".hold/", "", tar.TypeDir, 0o755, 7, 8},
		{".hold/staging-x/", "", tar.TypeDir, 0o755, 7, 8},
		{".hold/staging-x/d/", "", tar.TypeDir, 0o555, 7, 8},
		{".hold/staging-x/d/f", "", tar.TypeReg, 0o644, 7, 8},
		{".hold/staging-x/h", ".hold/staging-x/d/f", tar.TypeLink, 0o644, 7, 8},
		{".hold/staging-x/l", "d/f", tar.TypeSymlink, 0o644, 7, 8},
	}
	if len(got) != len(want) {
		t.Fatalf("members: got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("member %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	dst, _ := openRoot(t)
	if _, err := archive.Extract(dst, bytes.NewReader(out.Bytes()), archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".hold/staging-x/d/f", ".hold/staging-x/h", ".hold/staging-x/l"} {
		if b, err := dst.ReadFile(name); err != nil || string(b) != "data" {
			t.Errorf("%s after extraction: %q, %v, want %q", name, b, err, "data")
		}
	}

	// Parents the archive leaves out come before their first member, owned
	// like the rest (the daemon would make them itself, owned by root).
	sparse := tarOf(t,
		member{name: "a/b/f", typ: tar.TypeReg, data: "x"},
		member{name: "a/c/", typ: tar.TypeDir, mode: 0o700},
		member{name: "a/c/g", typ: tar.TypeReg, data: "y"},
		member{name: "e/f", typ: tar.TypeReg, data: "z"},
	)
	out.Reset()
	if st, err := archive.CopyUnder(&out, bytes.NewReader(sparse), archive.Limits{}, 7, 8, "s"); err != nil || st.Members != 4 {
		t.Fatalf("CopyUnder of an archive without its directories: %+v, %v", st, err)
	}
	got = nil
	tr = tar.NewReader(bytes.NewReader(out.Bytes()))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, row{h.Name, h.Linkname, h.Typeflag, h.Mode, h.Uid, h.Gid})
	}
	want = []row{
		{"s/", "", tar.TypeDir, 0o755, 7, 8},
		{"s/a/", "", tar.TypeDir, 0o755, 7, 8},
		{"s/a/b/", "", tar.TypeDir, 0o755, 7, 8},
		{"s/a/b/f", "", tar.TypeReg, 0o644, 7, 8},
		{"s/a/c/", "", tar.TypeDir, 0o700, 7, 8},
		{"s/a/c/g", "", tar.TypeReg, 0o644, 7, 8},
		{"s/e/", "", tar.TypeDir, 0o755, 7, 8},
		{"s/e/f", "", tar.TypeReg, 0o644, 7, 8},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("members of the sparse archive:\n got %+v\nwant %+v", got, want)
	}
	under := tarOf(t, member{name: "f", typ: tar.TypeReg, data: "x"}, member{name: "f/g", typ: tar.TypeReg, data: "y"})
	if _, err := archive.CopyUnder(&bytes.Buffer{}, bytes.NewReader(under), archive.Limits{}, 0, 0, "s"); errcode.Of(err) != errcode.InvalidArchive {
		t.Errorf("a member under a file: got %v, want invalid_archive", err)
	}

	bad := tarOf(t, member{name: "ok", typ: tar.TypeReg, data: "x"}, member{name: "../evil", typ: tar.TypeReg, data: "x"})
	if _, err := archive.CopyUnder(io.Discard, bytes.NewReader(bad), archive.Limits{}, 0, 0, "s"); errcode.Of(err) != errcode.InvalidArchive {
		t.Errorf("hostile archive: got %v, want invalid_archive", err)
	}
	for _, dir := range []string{"", ".", "..", "../a", "/a", "a/", "a//b", "a/../b", "a\x00"} {
		if _, err := archive.CopyUnder(io.Discard, bytes.NewReader(in), archive.Limits{}, 0, 0, dir); err == nil {
			t.Errorf("CopyUnder into %q: got nil error, want one", dir)
		}
	}
}
