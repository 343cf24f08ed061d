package runtimetest

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"path"
	"testing"
)

// TarMember is one member of a workspace archive as tests compare them:
// its type, permission bits, and a file's content or a link's target.
type TarMember struct {
	Type    byte
	Mode    int64
	Content string
}

// TarMembers reads a tar into its members by clean name, leaving out the
// root entry; old-style regular files count as regular. A malformed tar
// fails the test.
func TarMembers(t testing.TB, data []byte) map[string]TarMember {
	t.Helper()
	out := map[string]TarMember{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		name := path.Clean(h.Name)
		if name == "." {
			continue
		}
		m := TarMember{Type: h.Typeflag, Mode: h.Mode & 0o7777, Content: h.Linkname}
		if m.Type == tar.TypeRegA {
			m.Type = tar.TypeReg
		}
		if m.Type == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			m.Content = string(b)
		}
		out[name] = m
	}
}
