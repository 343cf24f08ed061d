// Package snapshottest is test support for what reads workspaces into
// manifests: random changes to a tree of the kinds a sandbox makes
// (files created, modified, renamed and removed, directories renamed and
// removed, modes changed, symlinks, a file replaced by a directory, hard
// links written through), for property tests that compare an incremental
// scan with a full one. It is a library package that tests import; it
// imports no test environment.
package snapshottest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Populate writes files files in the directories d0..d3 of dir.
func Populate(t testing.TB, rng *rand.Rand, dir string, files int) {
	t.Helper()
	for i := range files {
		writeFile(t, dir, fmt.Sprintf("d%d/f%d", i%4, i), rng.IntN(2000), rng)
	}
}

// Change makes one random change in dir and says what it did (for
// failure messages); hard links only with links (the last of ops: a tree
// with one is always scanned in full). Modifications change a file's
// size: one in the same timestamp tick as the file's last scan, at the
// same size, is the racily-clean case that a hash cache's rule covers,
// not a change record.
func Change(t testing.TB, rng *rand.Rand, dir string, links bool) string {
	t.Helper()
	n := len(ops)
	if !links {
		n--
	}
	return ops[rng.IntN(n)](t, rng, dir)
}

// writeFile writes n random bytes to rel in dir, making its parents.
func writeFile(t testing.TB, dir, rel string, n int, rng *rand.Rand) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ops are the changes Change picks from.
var ops = []func(t testing.TB, rng *rand.Rand, dir string) string{
	func(t testing.TB, rng *rand.Rand, dir string) string { // create a file
		p := fmt.Sprintf("d%d/n%d", rng.IntN(4), rng.Uint64())
		writeFile(t, dir, p, rng.IntN(3000), rng)
		return "create " + p
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // modify in place
		p := pickFile(rng, dir)
		if p == "" {
			return "modify: no file"
		}
		f, err := os.OpenFile(filepath.Join(dir, p), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Write([]byte{byte(rng.Uint32()), byte(rng.Uint32())})
		f.Close()
		return "modify " + p
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // rename a file
		p := pickFile(rng, dir)
		if p == "" {
			return "rename: no file"
		}
		to := fmt.Sprintf("d%d/r%d", rng.IntN(4), rng.Uint64())
		_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, to)), 0o755)
		if err := os.Rename(filepath.Join(dir, p), filepath.Join(dir, to)); err != nil {
			t.Fatal(err)
		}
		return "rename " + p + " " + to
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // rename a directory
		from, to := fmt.Sprintf("d%d", rng.IntN(4)), fmt.Sprintf("d%d", rng.IntN(4))
		if from == to {
			return "rename dir: same"
		}
		_ = os.RemoveAll(filepath.Join(dir, to))
		if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return "rename dir " + from + " " + to
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // rm -r a directory
		p := fmt.Sprintf("d%d", rng.IntN(4))
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
		return "rm -r " + p
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // rm a file
		p := pickFile(rng, dir)
		if p == "" {
			return "rm: no file"
		}
		if err := os.Remove(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
		return "rm " + p
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // chmod a file or a directory
		p := pickFile(rng, dir)
		if rng.IntN(2) == 0 || p == "" {
			p = fmt.Sprintf("d%d", rng.IntN(4))
			_ = os.Chmod(filepath.Join(dir, p), 0o700|os.FileMode(rng.IntN(2))*0o055)
			return "chmod dir " + p
		}
		_ = os.Chmod(filepath.Join(dir, p), 0o600|os.FileMode(rng.IntN(2))*0o111)
		return "chmod " + p
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // a symlink, or one replaced
		p := fmt.Sprintf("d%d/s%d", rng.IntN(4), rng.IntN(3))
		_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		_ = os.Remove(filepath.Join(dir, p))
		if err := os.Symlink(fmt.Sprintf("t%d", rng.IntN(100)), filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
		return "symlink " + p
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // a directory made with files in it
		p := fmt.Sprintf("d%d/sub%d", rng.IntN(4), rng.IntN(3))
		writeFile(t, dir, p+"/deep/x", 100, rng)
		return "mkdir -p " + p
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // a file replaced by a directory
		p := pickFile(rng, dir)
		if p == "" {
			return "replace: no file"
		}
		_ = os.Remove(filepath.Join(dir, p))
		writeFile(t, dir, p+"/in", 10, rng)
		return "file to dir " + p
	},
	func(t testing.TB, rng *rand.Rand, dir string) string { // a hard link, then written through
		p := pickFile(rng, dir)
		if p == "" {
			return "link: no file"
		}
		l := fmt.Sprintf("d%d/l%d", rng.IntN(4), rng.IntN(1000))
		_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, l)), 0o755)
		if err := os.Link(filepath.Join(dir, p), filepath.Join(dir, l)); err != nil {
			return "link: " + err.Error()
		}
		f, err := os.OpenFile(filepath.Join(dir, l), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Write([]byte("through the link"))
		f.Close()
		return "link " + p + " " + l
	},
}

// pickFile returns a random regular file of the tree ("" when none).
func pickFile(rng *rand.Rand, dir string) string {
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	if len(files) == 0 {
		return ""
	}
	slices.Sort(files)
	return files[rng.IntN(len(files))]
}
