package commands

import (
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// Snapshot describes a stored workspace archive (see objectstore).
type Snapshot struct {
	ID   string `json:"snapshot_id"`
	Name string `json:"name"`
	// SHA256 is the hex sha256 of the tar: the workspace's fingerprint.
	SHA256 string `json:"sha256"`
	// StoredSHA256 is the hex sha256 of the stored (maybe compressed)
	// bytes, which a download is checked against.
	StoredSHA256 string `json:"stored_sha256,omitempty"`
	Size         int64  `json:"size"` // stored bytes
	Members      int    `json:"members"`
	Bytes        int64  `json:"bytes"` // sum of the regular members' sizes
	Format       string `json:"format"`
	// RootSHA256 is the root digest of a manifest snapshot (format
	// "manifest", see package snapshot); empty for a tar.
	RootSHA256 string `json:"root_sha256,omitempty"`
	// Seq is the session event seq of the operation that made it (the
	// start of its persist or stop).
	Seq     uint64    `json:"seq,omitempty"`
	Created time.Time `json:"created"`
	// Kind is "" for a workspace snapshot and SnapshotMemory for a memory
	// checkpoint (issue 27), whose manifest holds the runtime's checkpoint
	// directory, not the workspace, and which only a resume brings back.
	Kind string `json:"kind,omitempty"`
	// Memory describes a memory checkpoint's files (nil otherwise); a
	// resume refuses a checkpoint whose files record other digests.
	Memory *MemoryImage `json:"memory,omitempty"`
}

// SnapshotMemory is the Kind of a memory checkpoint.
const SnapshotMemory = "memory"

// IsMemory reports whether the snapshot is a memory checkpoint.
func (s *Snapshot) IsMemory() bool { return s != nil && s.Kind == SnapshotMemory }

// MemoryImage is what a memory checkpoint holds: the runtime that wrote
// it, and the digests ("sha256:" and hex) and sizes of the image of the
// processes and their memory and of the workspace's tar.
type MemoryImage struct {
	Runtime         string `json:"runtime"`
	ImageSHA256     string `json:"image_sha256"`
	ImageBytes      int64  `json:"image_bytes"`
	WorkspaceSHA256 string `json:"workspace_sha256"`
	WorkspaceBytes  int64  `json:"workspace_bytes"`
}

// CheckpointArgs are the checkpoint op's arguments.
type CheckpointArgs struct {
	// LeaveRunning keeps the sandbox running after the checkpoint; without
	// it the session is stopped (engine sandbox stop --memory).
	LeaveRunning bool `json:"leave_running,omitempty"`
}

// Validate accepts any checkpoint arguments (there is nothing to check;
// it exists so that every op's args validate alike).
func (a *CheckpointArgs) Validate() error { return nil }

// SnapshotResult answers persist, and stop (which persists first).
type SnapshotResult struct {
	Status   string    `json:"status,omitempty"`
	Snapshot *Snapshot `json:"snapshot,omitempty"`
}

// HydrateArgs replace the workspace with a snapshot of the session or an
// uploaded archive (exactly one).
type HydrateArgs struct {
	SnapshotID string `json:"snapshot_id,omitempty"`
	// Upload is the object name an upload to the workspace bucket returned.
	Upload string `json:"upload,omitempty"`
}

// Validate checks the hydrate arguments.
func (a *HydrateArgs) Validate() error {
	if (a.SnapshotID == "") == (a.Upload == "") {
		return errcode.New(errcode.InvalidRequest, "exactly one of snapshot_id and upload must be set")
	}
	if a.SnapshotID != "" {
		return CheckToken("snapshot_id", a.SnapshotID)
	}
	if len(a.Upload) > 512 {
		return errcode.New(errcode.InvalidRequest, "upload name is longer than 512 bytes")
	}
	return nil
}

// HydrateResult answers hydrate.
type HydrateResult struct {
	Members int   `json:"members"`
	Bytes   int64 `json:"bytes"`
}

// ResumeArgs bring a session back. SecretEnv gives the secret values again
// when the session must be re-created on another node (they are never
// recorded, so no node can restore them on its own).
type ResumeArgs struct {
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	// Empty (1.2) lets a session that has no snapshot come back with an
	// empty workspace (a lost session that was never persisted); without
	// it such a resume is invalid_state. A snapshot, when there is one, is
	// restored all the same.
	Empty bool `json:"empty,omitempty"`
	// Egress (1.4), when given, is the session's egress policy from this
	// resume on (recorded with it). A change to or from open needs a new
	// sandbox: the resume of a session whose sandbox is still there
	// refuses it (invalid_state); shut the session down first.
	Egress *Egress `json:"egress,omitempty"`
	// AtSeq (issue 25), when not 0, restores the last snapshot the
	// session recorded at or before this event seq (point-in-time
	// restore) instead of its newest: not_found when there is none. A
	// running sandbox gets it in place, as a hydrate would.
	AtSeq uint64 `json:"at_seq,omitempty"`
}

// Validate checks the resume arguments.
func (a *ResumeArgs) Validate() error {
	if len(a.SecretEnv) > MaxEnvVars {
		return errcode.New(errcode.InvalidRequest, "more than %d environment variables", MaxEnvVars)
	}
	if err := checkSecrets(a.SecretEnv); err != nil {
		return err
	}
	if a.Egress != nil {
		if err := a.Egress.Validate(); err != nil {
			return err
		}
	}
	return checkEnv(a.SecretEnv)
}

// ResumeResult answers resume.
type ResumeResult struct {
	Status string `json:"status"`
	Node   string `json:"node"`
	Epoch  uint64 `json:"epoch"`
	// Restored says whether the workspace was restored from SnapshotID;
	// false when the sandbox still ran with the snapshot's fingerprint.
	Restored   bool   `json:"restored"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	// Memory says the snapshot was a memory checkpoint: the sandbox's
	// processes came back running from it (issue 27).
	Memory bool `json:"memory,omitempty"`
}

// ResumeRequest is what a client sends to the scheduler's resume subject
// when the session's own subject has no responder.
type ResumeRequest struct {
	SessionID string            `json:"session_id"`
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	// Empty is ResumeArgs.Empty.
	Empty bool `json:"empty,omitempty"`
	// Egress is ResumeArgs.Egress.
	Egress *Egress `json:"egress,omitempty"`
	// AtSeq is ResumeArgs.AtSeq.
	AtSeq uint64 `json:"at_seq,omitempty"`
}

// Validate checks the request.
func (r *ResumeRequest) Validate() error {
	if err := CheckToken("session_id", r.SessionID); err != nil {
		return err
	}
	a := ResumeArgs{SecretEnv: r.SecretEnv, Egress: r.Egress}
	return a.Validate()
}

// ResumePlacement is what the scheduler sends to the node it chose to
// resume a session on.
type ResumePlacement struct {
	Tenant    string            `json:"tenant"`
	SessionID string            `json:"session_id"`
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	// Empty is ResumeArgs.Empty.
	Empty bool `json:"empty,omitempty"`
	// Egress is ResumeArgs.Egress.
	Egress *Egress `json:"egress,omitempty"`
	// AtSeq is ResumeArgs.AtSeq.
	AtSeq uint64 `json:"at_seq,omitempty"`
}
