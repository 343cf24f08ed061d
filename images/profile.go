package images

import (
	"archive/tar"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"path"
)

// Profile is the Python image's /etc/profile: Debian's, setting the same,
// with the user id read by the shell's builtins instead of $(id -u)
// (issue 26: a login shell, `sh -lc CMD`, paid a fork and an exec of id
// for it). profile/profile.debian is Debian's, which TestLoginProfile
// checks it against.
//
//go:embed profile/profile
var Profile string

// RootProfile is the Python image's /root/.profile: Debian's, with
// `mesg n` run only when stdin is a terminal (the only case it does
// anything in).
//
//go:embed profile/root.profile
var RootProfile string

// imageFiles are the files of the Python image's root file system that
// BuildPython replaces as it imports it, by member name.
var imageFiles = map[string]string{
	"etc/profile":   Profile,
	"root/.profile": RootProfile,
}

// withImageFiles returns r, a root file system tar, with the members
// imageFiles names given their content there (mode, owner and times as
// they were). The tar is rewritten as it is read, so a cached root file
// system gets them too. Stop the rewriting by closing the returned
// reader; it ends by itself at the end of r.
func withImageFiles(r io.Reader) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() { // ends at the end of r, or when pr is closed
		pw.CloseWithError(rewriteTar(r, pw, imageFiles))
	}()
	return pr
}

// rewriteTar copies the tar in r to w, replacing the content of the
// regular files whose cleaned name is a key of files.
func rewriteTar(r io.Reader, w io.Writer, files map[string]string) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("root file system tar: %w", err)
		}
		body, replace := files[path.Clean(hdr.Name)]
		if replace && hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(body))
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := io.WriteString(tw, body); err != nil {
				return err
			}
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
