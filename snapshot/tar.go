package snapshot

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
)

// FromTar reads a workspace tar as runtime.Sandbox.ExportWorkspace writes
// it (workspace-relative member names; directories, regular files,
// symlinks and hard links) into a manifest, cutting each file into chunks
// and handing every chunk to put (data is valid only during the call; a
// file's chunks come in order). Every member passes archive's checker
// with lim first, so a member that could leave the workspace, a special
// file or an archive past a limit is invalid_archive, as is a member under
// one that is not a directory or a directory replacing a file. A hard
// link becomes a file with its target's mode and chunks. Directories the
// archive does not list get mode 0755, as extraction makes them. Paths
// that skip excludes (and, for a directory, what is under it) are left
// out. put's error, or ctx's, stops the read and is returned.
func FromTar(ctx context.Context, r io.Reader, skip archive.Skip, lim archive.Limits,
	put func(digest string, data []byte) error) (*Manifest, error) {
	lim = archiveDefaults(lim)
	c := archive.NewChecker(lim)
	tr := tar.NewReader(&archive.CountingReader{R: r, Limit: lim.MaxArchiveBytes})
	entries := map[string]*Entry{}
	skipped := map[string]bool{} // directories, and whether they are left out
	buf := make([]byte, ChunkSize)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, name, err := c.Next(tr)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if isSkipped(name, skip, skipped) {
			continue
		}
		if !utf8.ValidString(name) {
			return nil, errcode.New(errcode.InvalidPath, "workspace path %q is not UTF-8: a manifest cannot hold it", name)
		}
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if e, ok := entries[p]; ok {
				if e.Kind != KindDir {
					return nil, errcode.New(errcode.InvalidArchive, "member %q lies under %q, which is not a directory", name, p)
				}
				break // its own parents are there too
			}
			entries[p] = &Entry{Path: p, Kind: KindDir, Mode: 0o755}
		}
		old := entries[name]
		if old != nil && (old.Kind == KindDir) != (h.Typeflag == tar.TypeDir) {
			return nil, errcode.New(errcode.InvalidArchive, "member %q replaces a %s of the same archive", name, old.Kind)
		}
		mode := uint32(h.Mode) & 0o7777
		switch h.Typeflag {
		case tar.TypeDir:
			entries[name] = &Entry{Path: name, Kind: KindDir, Mode: mode}
		case tar.TypeSymlink:
			if !utf8.ValidString(h.Linkname) {
				return nil, errcode.New(errcode.InvalidPath, "symlink %q has a target that is not UTF-8", name)
			}
			entries[name] = &Entry{Path: name, Kind: KindSymlink, Mode: 0o777, Target: h.Linkname}
		case tar.TypeLink:
			t := entries[h.Linkname]
			if t == nil || t.Kind != KindFile {
				continue // its target was left out
			}
			e := *t
			e.Path = name
			entries[name] = &e
		case tar.TypeReg:
			e := &Entry{Path: name, Kind: KindFile, Mode: mode, Size: h.Size}
			for i := range chunkCount(h.Size) {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				n := chunkLen(h.Size, int(i))
				if _, err := io.ReadFull(tr, buf[:n]); err != nil {
					if errcode.Of(err) == errcode.InvalidArchive {
						return nil, err
					}
					return nil, errcode.Wrap(errcode.InvalidArchive, err, "read archive member "+name)
				}
				sum := sha256.Sum256(buf[:n])
				d := hex.EncodeToString(sum[:])
				if err := put(d, buf[:n]); err != nil {
					return nil, err
				}
				e.Chunks = append(e.Chunks, d)
			}
			entries[name] = e
		}
	}
	m := &Manifest{Version: Version, Entries: make([]Entry, 0, len(entries))}
	for _, e := range entries {
		m.Entries = append(m.Entries, *e)
	}
	slices.SortFunc(m.Entries, cmpEntry)
	if err := m.validate(Limits{}.withDefaults()); err != nil {
		return nil, errcode.Wrap(errcode.InvalidArchive, err, "the archive makes no valid manifest")
	}
	return m, nil
}

// isSkipped reports whether skip leaves out name or one of its parent
// directories (asked once each, the answer kept in dirs), whether or not
// the archive lists them.
func isSkipped(name string, skip archive.Skip, dirs map[string]bool) bool {
	if skip == nil {
		return false
	}
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		out, ok := dirs[p]
		if !ok {
			out = skip(p)
			dirs[p] = out
		}
		if out {
			return true
		}
	}
	return skip(name)
}

func archiveDefaults(l archive.Limits) archive.Limits {
	d := archive.DefaultLimits()
	if l.MaxArchiveBytes <= 0 {
		l.MaxArchiveBytes = d.MaxArchiveBytes
	}
	if l.MaxExtractedBytes <= 0 {
		l.MaxExtractedBytes = d.MaxExtractedBytes
	}
	if l.MaxMembers <= 0 {
		l.MaxMembers = d.MaxMembers
	}
	return l
}

// fetched is one chunk get of WriteTar's prefetch.
type fetched struct {
	data []byte
	err  error
}

// WriteTar writes the manifest m as a workspace tar that
// runtime.Sandbox.StageWorkspace and ImportWorkspace accept, named as
// ExportWorkspace names members (workspace-relative, directories with a
// trailing slash, no owners), every member dated the time of the call.
// File content comes from get, with up to parallel gets in flight ahead
// of the writer, in order, so that at most parallel+1 chunks are held at
// once (parallel below 1 is 1). A manifest that does not validate is
// invalid_request; a chunk whose sha256 is not its digest, or whose length
// is not the manifest's, is internal "corrupt chunk"; a get's error, or
// ctx's, stops the write and is returned (wrapped).
func WriteTar(ctx context.Context, w io.Writer, m *Manifest,
	get func(ctx context.Context, digest string) ([]byte, error), parallel int) (archive.Stats, error) {
	var st archive.Stats
	if err := m.validate(Limits{}.withDefaults()); err != nil {
		return st, err
	}
	parallel = max(parallel, 1)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: every get has returned
	defer cancel()
	queue := make(chan chan fetched, parallel)
	wg.Go(func() {
		defer close(queue)
		for _, e := range m.Entries {
			for _, d := range e.Chunks {
				done := make(chan fetched, 1)
				select {
				case queue <- done:
				case <-ctx.Done():
					return
				}
				wg.Go(func() {
					data, err := get(ctx, d)
					done <- fetched{data, err}
				})
			}
		}
	})
	next := func(e *Entry, i int) ([]byte, error) {
		var done chan fetched
		select {
		case done = <-queue:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var f fetched
		select {
		case f = <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		d := e.Chunks[i]
		if f.err != nil {
			return nil, fmt.Errorf("chunk %s of %s: %w", d, e.Path, f.err)
		}
		if sum := sha256.Sum256(f.data); hex.EncodeToString(sum[:]) != d || int64(len(f.data)) != chunkLen(e.Size, i) {
			return nil, errcode.New(errcode.Internal, "corrupt chunk %s of %s", d, e.Path)
		}
		return f.data, nil
	}
	tw := tar.NewWriter(w)
	mtime := time.Now().Truncate(time.Second)
	for i := range m.Entries {
		e := &m.Entries[i]
		h := headerOf(e, mtime)
		if err := tw.WriteHeader(h); err != nil {
			return st, fmt.Errorf("write archive: %w", err)
		}
		st.Members++
		for c := range e.Chunks {
			data, err := next(e, c)
			if err != nil {
				return st, err
			}
			if _, err := tw.Write(data); err != nil {
				return st, fmt.Errorf("write archive: %w", err)
			}
			st.Bytes += int64(len(data))
		}
	}
	if err := tw.Close(); err != nil {
		return st, fmt.Errorf("write archive: %w", err)
	}
	return st, nil
}

// headerOf returns the tar header WriteTar writes for e, dated mtime.
func headerOf(e *Entry, mtime time.Time) *tar.Header {
	h := &tar.Header{Name: e.Path, Mode: int64(e.Mode), ModTime: mtime, Format: tar.FormatPAX}
	switch e.Kind {
	case KindDir:
		h.Typeflag, h.Name = tar.TypeDir, e.Path+"/"
	case KindSymlink:
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.Target
	case KindFile:
		h.Typeflag, h.Size = tar.TypeReg, e.Size
	}
	return h
}
