package runtime

import (
	"path"
	"strings"

	"github.com/paddock-dev/paddock/errcode"
)

// DefaultWorkspaceRoot is the workspace directory as a sandbox sees it when
// the create spec names none.
const DefaultWorkspaceRoot = "/workspace"

// The limits of a Linux path, which every runtime's file system shares:
// NAME_MAX bytes per component, and PATH_MAX less its terminating NUL for a
// whole path as the sandbox sees it (the workspace root included). The
// kernel refuses anything longer (ENAMETOOLONG), so Rel refuses it before
// any I/O, and a runtime refuses it in a symlink target.
const (
	MaxNameBytes = 255
	MaxPathBytes = 4095
)

// Rel turns a workspace path into a clean slash-separated path relative to
// the workspace root ("." for the root itself). A relative p is taken from
// the root; an absolute p must lie under root. Anything that leaves the root
// lexically, holds a NUL byte, has a component over MaxNameBytes or is
// longer than MaxPathBytes under root is an invalid_path error. Rel does
// not look at the file system: symlinks are the runtime's to check.
func Rel(root, p string) (string, error) {
	rel, err := rel(root, p)
	if err != nil {
		return "", err
	}
	if err := CheckLength(root, rel); err != nil {
		return "", err
	}
	return rel, nil
}

// CheckLength returns invalid_path when rel, a clean path relative to root,
// has a component longer than MaxNameBytes or makes a path under root longer
// than MaxPathBytes. The message names neither in full.
func CheckLength(root, rel string) error {
	if root == "" {
		root = DefaultWorkspaceRoot
	}
	if rel != "." && len(path.Clean(root))+1+len(rel) > MaxPathBytes {
		return errcode.New(errcode.InvalidPath, "path of %d bytes is too long: at most %d bytes under the workspace root %s", len(rel), MaxPathBytes, root)
	}
	for len(rel) > MaxNameBytes {
		name, rest, _ := strings.Cut(rel, "/")
		if len(name) > MaxNameBytes {
			return errcode.New(errcode.InvalidPath, "path component %.32q... of %d bytes is too long: at most %d", name, len(name), MaxNameBytes)
		}
		rel = rest
	}
	return nil
}

func rel(root, p string) (string, error) {
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
