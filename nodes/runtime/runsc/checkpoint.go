package runsc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// The files of a checkpoint directory.
const (
	// ImageFile is runsc's image of the processes and their memory.
	ImageFile = "checkpoint.img"
	// WorkspaceFile is the workspace's tar at the checkpoint.
	WorkspaceFile = "workspace.tar"
	// MetaFile records what a restore needs and the digests of the two.
	MetaFile = "checkpoint.json"
	// metaVersion is MetaFile's format.
	metaVersion = 1
)

// Meta is a checkpoint's MetaFile.
type Meta struct {
	Version int `json:"version"`
	// ContainerID is the id the checkpointed container had (a restore
	// runs under an id of its own).
	ContainerID   string `json:"container_id"`
	Image         string `json:"image"`
	User          string `json:"user"`
	WorkspaceRoot string `json:"workspace_root"`
	runtime.CheckpointInfo
}

// ReadMeta reads and checks a checkpoint directory's MetaFile: a missing
// or unreadable one is invalid_request, an unknown version
// unsupported_version.
func ReadMeta(dir string) (Meta, error) {
	data, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return Meta{}, errcode.Wrap(errcode.InvalidRequest, err, "not a runsc checkpoint directory")
	}
	var m Meta
	if err := json.Unmarshal(data, &m); err != nil {
		return Meta{}, errcode.Wrap(errcode.InvalidRequest, err, "not a runsc checkpoint directory")
	}
	if m.Version != metaVersion {
		return Meta{}, errcode.New(errcode.UnsupportedVersion, "runsc checkpoint version %d (this node reads %d)", m.Version, metaVersion)
	}
	if m.ContainerID == "" || m.Image == "" || m.ImageDigest == "" || m.WorkspaceDigest == "" {
		return Meta{}, errcode.New(errcode.InvalidRequest, "the runsc checkpoint's %s is incomplete", MetaFile)
	}
	return m, nil
}

// InspectCheckpoint returns what dir's MetaFile records of the files
// (ReadMeta's errors).
func (r *Runtime) InspectCheckpoint(dir string) (runtime.CheckpointInfo, error) {
	m, err := ReadMeta(dir)
	return m.CheckpointInfo, err
}

// Checkpoint writes the sandbox's processes and memory, and then its
// workspace as they left it, into dir (made if missing; it must hold no
// checkpoint yet), and the digests of both. The sandbox is stopped by the
// checkpoint; with leaveRunning it is restored from the image at once.
// A stopped sandbox, or one with an exec in flight (which could not be
// brought back), is invalid_state; a file in the way already_exists.
func (s *Sandbox) Checkpoint(ctx context.Context, dir string, leaveRunning bool) (runtime.CheckpointInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.shut:
		return runtime.CheckpointInfo{}, errcode.New(errcode.InvalidState, "sandbox is shut down")
	case !s.running:
		return runtime.CheckpointInfo{}, errcode.New(errcode.InvalidState, "checkpoint: the sandbox is stopped")
	case s.execs > 0:
		return runtime.CheckpointInfo{}, errcode.New(errcode.InvalidState, "checkpoint: %d commands are running; wait for them or end them first", s.execs)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return runtime.CheckpointInfo{}, errcode.Wrap(errcode.RuntimeError, err, "checkpoint: make the directory")
	}
	for _, f := range []string{ImageFile, WorkspaceFile, MetaFile} {
		if _, err := os.Lstat(filepath.Join(dir, f)); !errors.Is(err, fs.ErrNotExist) {
			return runtime.CheckpointInfo{}, errcode.New(errcode.AlreadyExists, "checkpoint: the directory already holds %s", f)
		}
	}
	if _, err := s.rt.runsc(ctx, s.root(), "checkpoint", "--image-path", dir, s.id); err != nil {
		// runsc may have stopped it anyway: read the state again.
		s.running = s.containerRuns(context.WithoutCancel(ctx))
		return runtime.CheckpointInfo{}, errcode.Wrap(errcode.RuntimeError, err, "checkpoint")
	}
	s.running = false
	if err := s.deleteLocked(ctx); err != nil {
		return runtime.CheckpointInfo{}, err
	}
	info, err := s.writeWorkspace(ctx, dir)
	if err != nil {
		return info, err
	}
	meta := Meta{Version: metaVersion, ContainerID: s.id, Image: s.image,
		User: strconv.Itoa(s.uid) + ":" + strconv.Itoa(s.gid), WorkspaceRoot: s.vroot, CheckpointInfo: info}
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return info, errcode.Wrap(errcode.Internal, err, "checkpoint: encode")
	}
	if err := os.WriteFile(filepath.Join(dir, MetaFile), data, 0o600); err != nil {
		return info, errcode.Wrap(errcode.RuntimeError, err, "checkpoint: write "+MetaFile)
	}
	if leaveRunning {
		if err := s.restoreLocked(ctx, dir); err != nil {
			return info, fmt.Errorf("checkpoint written, but the sandbox could not be left running: %w", err)
		}
	}
	return info, nil
}

// writeWorkspace hashes the image and writes and hashes the workspace's
// tar.
func (s *Sandbox) writeWorkspace(ctx context.Context, dir string) (runtime.CheckpointInfo, error) {
	var info runtime.CheckpointInfo
	d, n, err := digestFile(filepath.Join(dir, ImageFile))
	if err != nil {
		return info, errcode.Wrap(errcode.RuntimeError, err, "checkpoint: read the image")
	}
	info.ImageDigest, info.ImageBytes = d, n
	f, err := os.OpenFile(filepath.Join(dir, WorkspaceFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return info, errcode.Wrap(errcode.RuntimeError, err, "checkpoint: write the workspace")
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	_, err = s.ws.ExportWorkspace(ctx, cw, nil)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return info, errcode.Wrap(errcode.RuntimeError, err, "checkpoint: write the workspace")
	}
	info.WorkspaceDigest, info.WorkspaceBytes = "sha256:"+hex.EncodeToString(h.Sum(nil)), cw.n
	return info, nil
}

// restoreLocked runs runsc restore of the image in dir as this sandbox's
// container. s.mu must be held.
func (s *Sandbox) restoreLocked(ctx context.Context, dir string) error {
	if err := s.deleteLocked(ctx); err != nil {
		return err
	}
	s.exists = true // a restore that fails may leave processes: delete tries
	if _, err := s.rt.runsc(ctx, s.root(), "restore", "--image-path", dir, "--detach", "--bundle", s.dir, s.id); err != nil {
		_ = s.deleteLocked(context.WithoutCancel(ctx))
		return errcode.Wrap(errcode.RuntimeError, err, "restore")
	}
	s.running = true
	return nil
}

// Restore brings a checkpoint back as a new sandbox named by spec, under a
// runsc root and a container id of its own (so that N restores of one
// checkpoint run side by side). The image and the workspace are copied into the sandbox's own
// directory while their digests are computed, and a copy that does not
// match what MetaFile records is snapshot_corrupt: nothing runs from a
// tampered checkpoint, and nothing can change the copy between the check
// and the restore. spec's Image, User and WorkspaceRoot are the
// checkpoint's (a different image in spec is invalid_request).
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, dir string) (runtime.Sandbox, error) {
	meta, err := ReadMeta(dir)
	if err != nil {
		return nil, err
	}
	if spec.Image != "" && spec.Image != meta.Image {
		return nil, errcode.New(errcode.InvalidRequest, "restore: the checkpoint is of image %s, not %s", meta.Image, spec.Image)
	}
	spec.Image, spec.User, spec.WorkspaceRoot = meta.Image, meta.User, meta.WorkspaceRoot
	// A container id of its own: runsc names a sandbox's control socket
	// (an abstract one, shared by every runsc root of the host) after it,
	// so restores of one checkpoint beside each other, or beside the
	// original, cannot reuse the id the image records. The restored
	// processes keep that old id inside gVisor, so `runsc kill --pid` does
	// not reach them (processes the restored sandbox execs afresh it does);
	// the sandbox's own kill reaches them all.
	sb, err := r.prepare(ctx, spec, "")
	if err != nil {
		return nil, err
	}
	if err := sb.restoreFrom(ctx, dir, meta); err != nil {
		_ = sb.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	return sb, nil
}

func (s *Sandbox) restoreFrom(ctx context.Context, dir string, meta Meta) error {
	own := filepath.Join(s.dir, "ckpt")
	if err := os.Mkdir(own, 0o700); err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "restore: make the image's directory")
	}
	if err := copyChecked(filepath.Join(dir, ImageFile), filepath.Join(own, ImageFile), meta.ImageDigest); err != nil {
		return err
	}
	// The workspace is hashed in full before it is imported: a tar that
	// does not match is never extracted.
	tmp := filepath.Join(own, WorkspaceFile)
	if err := copyChecked(filepath.Join(dir, WorkspaceFile), tmp, meta.WorkspaceDigest); err != nil {
		return err
	}
	wf, err := os.Open(tmp)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "restore: the workspace")
	}
	_, err = s.ws.ImportWorkspace(ctx, wf, archive.DefaultLimits())
	wf.Close()
	_ = os.Remove(tmp)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ownTree(); err != nil {
		return err
	}
	return s.restoreLocked(ctx, own)
}

// copyChecked copies src to dst and fails with snapshot_corrupt (dst
// removed) when the copy's digest is not want.
func copyChecked(src, dst, want string) error {
	in, err := os.Open(src)
	if err != nil {
		return errcode.Wrap(errcode.SnapshotCorrupt, err, "restore: the checkpoint lacks "+filepath.Base(src))
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "restore: copy "+filepath.Base(src))
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(dst)
		return errcode.Wrap(errcode.RuntimeError, err, "restore: copy "+filepath.Base(src))
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want {
		_ = os.Remove(dst)
		return errcode.New(errcode.SnapshotCorrupt, "restore: %s has digest %s, the checkpoint records %s; refused", filepath.Base(src), got, want)
	}
	return nil
}

// digestFile returns a file's sha256 digest and size.
func digestFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
