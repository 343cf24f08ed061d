package nodes_test

import (
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestLsTargetKinds pins what ls returns for a target that is not a
// directory (docs/architecture.md, "What ls returns"), on both runtimes:
// a file or a symlink lists itself, one entry named by its base name, so
// joining the target and the entry's name makes a path that does not
// exist (invalid_request: a parent is not a directory); and that one-entry answer is the same as that of a directory
// holding one file of its own name, which a second ls tells apart.
func TestLsTargetKinds(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			st, image := snapStack(t, k, nodes.Config{})
			ctx := testenv.Context(t, 2*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			shell(t, st, s.SessionID, `echo hi > plain.txt && mkdir -p d/same && echo x > d/same/same && ln -s plain.txt link && ln -s d dlink`)
			for _, tc := range []struct {
				path, name, typ string
			}{
				{"plain.txt", "plain.txt", "file"},
				{"/workspace/plain.txt", "plain.txt", "file"},
				{"link", "link", "symlink"},   // not followed
				{"dlink", "dlink", "symlink"}, // a link to a directory lists itself too
				{"d/same", "same", "file"},    // a directory holding one file of its name: the same shape
			} {
				got, err := st.Client.List(ctx, s.SessionID, tc.path)
				if err != nil {
					t.Fatalf("ls %s: %v", tc.path, err)
				}
				if len(got) != 1 || got[0].Name != tc.name || got[0].Type != tc.typ {
					t.Errorf("ls %s = %+v; want one %s entry named %q", tc.path, got, tc.typ, tc.name)
				}
			}
			// The second ls that tells a file from such a directory: the
			// target joined with the name exists only for the directory.
			if got, err := st.Client.List(ctx, s.SessionID, "d/same/same"); err != nil || len(got) != 1 || got[0].Type != "file" {
				t.Errorf("ls d/same/same = %+v, %v; want the file", got, err)
			}
			_, err = st.Client.List(ctx, s.SessionID, "plain.txt/plain.txt")
			if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), "is not a directory") {
				t.Errorf("ls plain.txt/plain.txt = %v; want invalid_request: a parent is not a directory", err)
			}
			if err := st.Client.Delete(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
