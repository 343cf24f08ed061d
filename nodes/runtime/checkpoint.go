package runtime

import (
	"context"

	"github.com/paddock-dev/paddock/errcode"
)

// CheckpointInfo describes a memory checkpoint a sandbox wrote into a
// directory: the processes and their memory, and the workspace as it was
// at the same instant.
type CheckpointInfo struct {
	// ImageBytes is the size of the processes' and memory's image.
	ImageBytes int64
	// WorkspaceBytes is the size of the workspace's archive.
	WorkspaceBytes int64
	// ImageDigest and WorkspaceDigest are the sha256 digests ("sha256:"
	// and hex) of the two files; a restore refuses files that do not
	// match the digests recorded beside them.
	ImageDigest     string
	WorkspaceDigest string
}

// Checkpointer is a sandbox that can write its processes, their memory and
// its workspace into a directory that a Restorer of the same runtime kind
// (on this node or another one) brings back running. With leaveRunning
// the sandbox keeps running after the checkpoint; without it the sandbox
// is stopped. A checkpoint while a command of the runtime's own is in
// flight (an exec whose caller waits for it) is invalid_state: that
// command could not be brought back, and it is never silently lost.
type Checkpointer interface {
	Checkpoint(ctx context.Context, dir string, leaveRunning bool) (CheckpointInfo, error)
}

// Restorer is a runtime that can bring a sandbox back from a directory a
// Checkpointer of its kind wrote. spec names the new sandbox (tenant,
// session, epoch, node, limits); the image, user and workspace root are the
// checkpoint's. A directory whose files do not match their recorded
// digests is snapshot_corrupt and nothing is restored; one that is not a
// checkpoint is invalid_request.
type Restorer interface {
	Restore(ctx context.Context, spec Spec, dir string) (Sandbox, error)
}

// CheckpointInspector is a Restorer that reads what a checkpoint
// directory records of its files without restoring it, so that the node
// can compare it with the digests its chain recorded. A directory that is
// not a checkpoint is invalid_request.
type CheckpointInspector interface {
	InspectCheckpoint(dir string) (CheckpointInfo, error)
}

// ErrNoCheckpoint is the policy_denied answer of a runtime or sandbox that
// cannot checkpoint memory (every runtime but runsc's).
func ErrNoCheckpoint(runtimeName string) error {
	return errcode.New(errcode.PolicyDenied, "the %s runtime cannot checkpoint memory; use the runsc runtime (gVisor run by runsc directly)", runtimeName)
}

// CheckpointOf checkpoints sb when it is a Checkpointer and answers
// ErrNoCheckpoint(runtimeName) when it is not.
func CheckpointOf(ctx context.Context, runtimeName string, sb Sandbox, dir string, leaveRunning bool) (CheckpointInfo, error) {
	c, ok := sb.(Checkpointer)
	if !ok {
		return CheckpointInfo{}, ErrNoCheckpoint(runtimeName)
	}
	return c.Checkpoint(ctx, dir, leaveRunning)
}

// RestoreWith restores dir with rt when it is a Restorer and answers
// ErrNoCheckpoint when it is not.
func RestoreWith(ctx context.Context, rt Runtime, spec Spec, dir string) (Sandbox, error) {
	r, ok := rt.(Restorer)
	if !ok {
		return nil, ErrNoCheckpoint(rt.Name())
	}
	return r.Restore(ctx, spec, dir)
}
