package runtime

import (
	"path"
	"strings"

	"github.com/paddock-dev/paddock/errcode"
)

// DefaultWorkspaceRoot is the workspace directory as a sandbox sees it when
// the create spec names none.
const DefaultWorkspaceRoot = "/workspace"

// Rel turns a workspace path into a clean slash-separated path relative to
// the workspace root ("." for the root itself). A relative p is taken from
// the root; an absolute p must lie under root. Anything that leaves the root
// lexically, or holds a NUL byte, is an invalid_path error. Rel does not
// look at the file system: symlinks are the runtime's to check.
func Rel(root, p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", errcode.New(errcode.InvalidPath, "path contains a NUL byte")
	}
	if root == "" {
		root = DefaultWorkspaceRoot
	}
	if p == "" {
		return ".", nil
	}
	if path.IsAbs(p) {
		root = path.Clean(root)
		cp := path.Clean(p)
		if cp == root {
			return ".", nil
		}
		rest, ok := strings.CutPrefix(cp, root+"/")
		if !ok {
			return "", errcode.New(errcode.InvalidPath, "path %q is outside the workspace root %s", p, root)
		}
		return rest, nil
	}
	cp := path.Clean(p)
	if cp == ".." || strings.HasPrefix(cp, "../") {
		return "", errcode.New(errcode.InvalidPath, "path %q leaves the workspace root", p)
	}
	return cp, nil
}
