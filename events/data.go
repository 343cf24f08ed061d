package events

import (
	"encoding/json"
	"fmt"
	"github.com/paddock-dev/paddock/egress"
	"time"

	"github.com/paddock-dev/paddock/commands"
)

// The data payloads of session events, one type per op and phase (see
// NewData). The node writes them; the projection, replay, adoption and
// the docs read them through these same types. Within a major event
// Version they only gain optional fields.

// CreateStart is a create's start data: the spec, without secret values
// or manifest content.
type CreateStart struct {
	Runtime string            `json:"runtime"`
	Image   string            `json:"image,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// SecretEnvKeys names the secret variables; their values are never
	// recorded.
	SecretEnvKeys []string          `json:"secret_env_keys,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	// NodeLabels are the placement constraints the create asked (a resume
	// placed by the scheduler honours them too).
	NodeLabels  map[string]string `json:"node_labels,omitempty"`
	CPUs        float64           `json:"cpus,omitempty"`
	MemoryBytes int64             `json:"memory_bytes,omitempty"`
	// DiskBytes (1.5) is the disk bound the create asked for (0: the
	// node's default; the finish's disk_limit says what it got).
	DiskBytes     int64  `json:"disk_bytes,omitempty"`
	WorkspaceRoot string `json:"workspace_root"`
	Network       bool   `json:"network,omitempty"`
	// Egress (1.4) is the egress policy the create asked for (absent:
	// Network decides, as before 1.4).
	Egress    *commands.Egress `json:"egress,omitempty"`
	User      string           `json:"user,omitempty"`
	PidsLimit int64            `json:"pids_limit,omitempty"`
	// MaxProcesses is the create's process limit (0: the node's).
	MaxProcesses int `json:"max_processes,omitempty"`
	// ExpiresAt is when the session's lifetime ends (none when absent):
	// the node shuts it down then, and it is not started or resumed again.
	ExpiresAt *time.Time       `json:"expires_at,omitempty"`
	Manifest  []ManifestRecord `json:"manifest,omitempty"`
	// Epoch is the placement's epoch: 1 at create, one more at each
	// re-creation (resume of a shut-down or lost session).
	Epoch uint64 `json:"epoch"`
	// ExposedPorts (1.3) are the sandbox's ports that op port may resolve.
	ExposedPorts []int `json:"exposed_ports,omitempty"`
	// IdleTimeoutS (1.3) is the session's idle timeout as the node set it
	// (the create's, or the operator's default; 0: none).
	IdleTimeoutS int64 `json:"idle_timeout_s,omitempty"`
	// Parent (issue 25) is where a forked session came from: the parent's
	// snapshot its workspace was restored from. Only the scheduler's fork
	// places a create with one; a tenant's create never carries it.
	Parent *commands.Parent `json:"parent,omitempty"`
}

// ManifestRecord is a manifest entry as the create event records it:
// without its content.
type ManifestRecord struct {
	Path      string `json:"path"`
	Dir       bool   `json:"dir,omitempty"`
	Size      int    `json:"size,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Ephemeral bool   `json:"ephemeral,omitempty"`
}

// StatusFinish is the finish data of create, start, shutdown and delete:
// the session's status after the op, and the runtime's id of its sandbox
// when the op made one.
type StatusFinish struct {
	Status      string `json:"status"`
	ContainerID string `json:"container_id,omitempty"`
	// Reason says why the node itself ended the session (max_lifetime);
	// absent for a client's command.
	Reason string `json:"reason,omitempty"`
	Made
}

// Made says how a node made a sandbox (create, and a resume that made a
// new one): whether its operations go through its in-sandbox supervisor
// ("connected"; "docker_api: " and why not; absent on a runtime without
// one) and whether it was claimed from the node's warm pool, with how long
// the claim took.
type Made struct {
	Supervisor string  `json:"supervisor,omitempty"`
	Pooled     bool    `json:"pooled,omitempty"`
	ClaimMS    float64 `json:"claim_ms,omitempty"`
	// DiskLimit (1.5) is how the sandbox's disk is bounded.
	DiskLimit *DiskLimit `json:"disk_limit,omitempty"`
}

// DiskLimit is the bound on what a sandbox can write: Bytes, enforced by
// Mechanism, one of "storage-opt" (Docker's per-container quota),
// "loopfs" (a file system image of the sandbox's own holding every
// writable place) or "none" (no bound; Bytes is 0).
type DiskLimit struct {
	Bytes     int64  `json:"bytes"`
	Mechanism string `json:"mechanism"`
}

// ExecStart is an exec's start data. Argv has secret values redacted;
// env values are not recorded, only their names.
type ExecStart struct {
	Argv      []string `json:"argv"`
	Cwd       string   `json:"cwd,omitempty"`
	TimeoutMS int64    `json:"timeout_ms"`
	EnvKeys   []string `json:"env_keys,omitempty"`
	User      string   `json:"user,omitempty"`
	// Stream says the output was readable with exec_read as it came.
	Stream bool `json:"stream,omitempty"`
}

// PortStart (1.3) is the start data of port: the sandbox's port asked for.
type PortStart struct {
	Port int `json:"port"`
}

// PortFinish (1.3) is the finish data of port: the address on the node
// that reaches it (the SDK's server.address and server.port).
type PortFinish struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// ExecReadStart is the start data of exec_read: which streaming exec, and
// the last chunk the reader had.
type ExecReadStart struct {
	ExecCommandID string `json:"exec_command_id"`
	After         int64  `json:"after,omitempty"`
}

// ExecReadFinish is the finish data of exec_read: how much output went
// out (the output itself is recorded by the exec's finish, as the capture
// policy says).
type ExecReadFinish struct {
	Chunks  int   `json:"chunks"`
	Bytes   int64 `json:"bytes"`
	Done    bool  `json:"done,omitempty"`
	Unknown bool  `json:"unknown,omitempty"`
}

// ExecFinish is an exec's finish data; the exit code is the event's own
// exit_code field, and the output (when the capture policy keeps it) its
// stdout and stderr fields.
type ExecFinish struct {
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// Changes is what the command changed in the workspace, as a watch
	// saw it (none when the node's change attribution is off, or on the
	// Docker runtime without its supervisor).
	Changes *commands.Changes `json:"changes,omitempty"`
}

// PathStart is the start data of read: the path as the client gave it.
type PathStart struct {
	Path string `json:"path"`
}

// ReadFinish is a read's finish data: what was read, never the content.
type ReadFinish struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// WriteStart is a write's start data: the target and what the client said
// it sends (an upload's digest is known only at the finish).
type WriteStart struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	Mode   uint32 `json:"mode"`
	Upload bool   `json:"upload,omitempty"`
}

// WriteFinish is a write's finish data: what was written.
type WriteFinish struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Changes is what the write changed (exact): the file created or
	// modified, and the parent directories it made.
	Changes *commands.Changes `json:"changes,omitempty"`
}

// LsStart is an ls's start data.
type LsStart struct {
	Path  string `json:"path"`
	Limit int    `json:"limit,omitempty"`
	After string `json:"after,omitempty"`
}

// LsFinish is an ls's finish data: how many entries the page held and
// whether more follow.
type LsFinish struct {
	Entries int  `json:"entries"`
	More    bool `json:"more,omitempty"`
}

// RmStart is an rm's start data.
type RmStart struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
	Force     bool   `json:"force,omitempty"`
}

// RmFinish is an rm's finish data: whether anything was there to remove
// (false only with force).
type RmFinish struct {
	Removed bool `json:"removed"`
	// Changes is every path the rm removed (exact).
	Changes *commands.Changes `json:"changes,omitempty"`
}

// MkdirFinish is a mkdir's finish data: the directories it made (exact;
// none when the node's change attribution is off).
type MkdirFinish struct {
	Changes *commands.Changes `json:"changes,omitempty"`
}

// MkdirStart is a mkdir's start data.
type MkdirStart struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
}

// RunningFinish is running's finish data.
type RunningFinish struct {
	Running bool `json:"running"`
}

// CheckpointStart is the start data of checkpoint (issue 27).
type CheckpointStart struct {
	LeaveRunning bool `json:"leave_running,omitempty"`
}

// SnapshotFinish is the finish data of persist and stop (which persists
// first): the snapshot made, and stop's status; and of checkpoint, whose
// snapshot is a memory one (commands.Snapshot.Memory) and whose status is
// stopped unless the sandbox was left running.
type SnapshotFinish struct {
	Status   string             `json:"status,omitempty"`
	Snapshot *commands.Snapshot `json:"snapshot,omitempty"`
	// Reason (1.3) is why the node stopped the session by itself: idle.
	Reason string `json:"reason,omitempty"`
	// Unchanged (issue 25): the workspace's manifest root was the last
	// snapshot's, so no new snapshot was stored and Snapshot is that one
	// (same id, same root).
	Unchanged bool `json:"unchanged,omitempty"`
	// Chunks (issue 25) is what a manifest snapshot's persist read and
	// uploaded (nil for a tar).
	Chunks *ChunkCounts `json:"chunks,omitempty"`
}

// HydrateStart is a hydrate's start data: a snapshot of the session or an
// upload (exactly one).
type HydrateStart struct {
	SnapshotID string `json:"snapshot_id,omitempty"`
	Upload     string `json:"upload,omitempty"`
}

// HydrateFinish is a hydrate's finish data: what the workspace now holds.
type HydrateFinish struct {
	Members int   `json:"members"`
	Bytes   int64 `json:"bytes"`
	// Changes (issue 25) is what the hydrate changed in the workspace
	// (observed exact: the manifests before and after, compared).
	Changes *commands.Changes `json:"changes,omitempty"`
	// Chunks (issue 25) is where a manifest snapshot's chunks came from.
	Chunks *ChunkCounts `json:"chunks,omitempty"`
}

// ResumeStart is a resume's start data: the names of the secret variables
// given again (never their values), and whether the scheduler placed it
// on this node because no node served the session.
type ResumeStart struct {
	SecretEnvKeys []string `json:"secret_env_keys,omitempty"`
	Placed        bool     `json:"placed,omitempty"`
	// Empty: the resume was asked to start with an empty workspace.
	Empty bool `json:"empty,omitempty"`
	// Egress (1.4) is the egress policy the session has from this resume
	// on, when the resume changed it.
	Egress *commands.Egress `json:"egress,omitempty"`
	// AtSeq (issue 25) is the resume's point in time (ResumeArgs.AtSeq).
	AtSeq uint64 `json:"at_seq,omitempty"`
}

// ResumeFinish is a resume's finish data: where the session runs now,
// at which epoch, and whether its workspace was restored.
type ResumeFinish struct {
	Status      string `json:"status"`
	Node        string `json:"node"`
	Epoch       uint64 `json:"epoch"`
	Restored    bool   `json:"restored"`
	SnapshotID  string `json:"snapshot_id,omitempty"`
	ContainerID string `json:"container_id,omitempty"`
	Made
	// SnapshotSeq (issue 25) is the seq the restored (or kept) snapshot
	// was recorded at: with resume --at, the one chosen.
	SnapshotSeq uint64 `json:"snapshot_seq,omitempty"`
	// Chunks (issue 25) is where a restored manifest snapshot's chunks
	// came from.
	Chunks *ChunkCounts `json:"chunks,omitempty"`
	// Memory (issue 27): the snapshot was a memory checkpoint and the
	// sandbox's processes came back running from it.
	Memory bool `json:"memory,omitempty"`
}

// NodeInfo is what a node advertises: the data of its registered event
// and the body of its heartbeats.
type NodeInfo struct {
	Node     string   `json:"node"`
	Runtimes []string `json:"runtimes"`
	Capacity int      `json:"capacity"`
	Sessions int      `json:"sessions"`
	// Tenants counts the sessions by tenant (heartbeats; the scheduler
	// keeps each tenant's total across nodes with it).
	Tenants map[string]int    `json:"tenants,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Status is up or draining (stopped in the last heartbeat of a node
	// that stops).
	Status string `json:"status"`
	// Cordoned: the node takes no new sessions (engine node cordon).
	Cordoned bool      `json:"cordoned,omitempty"`
	TS       time.Time `json:"ts"`
	// SigningKey is the public key (an nkey) the node signs its events
	// with; audit verify trusts it for this node only as far as the key
	// was issued to the node (docs/security.md).
	SigningKey string `json:"signing_key,omitempty"`
	// Pools counts the node's ready warm-pool sandboxes by image;
	// placement prefers a node with one free for the create's image.
	Pools map[string]int `json:"pools,omitempty"`
	// Disks are the free space of the filesystems the node writes to (its
	// Docker data root or sandbox dir; in engine serve also the state
	// dir). A node with one at level critical takes no new sessions.
	Disks []DiskStatus `json:"disks,omitempty"`
}

// DiskStatus is the free space of one filesystem a node writes to.
type DiskStatus struct {
	Path  string `json:"path"`
	Free  uint64 `json:"free"`
	Total uint64 `json:"total"`
	// Level is ok, warn or critical (storage.Level).
	Level string `json:"level"`
}

// DiskCritical reports whether one of the node's filesystems is at level
// critical: the node refuses new sessions, so the scheduler places none
// on it.
func (n NodeInfo) DiskCritical() bool {
	for _, d := range n.Disks {
		if d.Level == "critical" {
			return true
		}
	}
	return false
}

// ProcStart is the start data of proc_start: the process as exec records
// one (argv and cwd with secret values redacted, env by name only).
type ProcStart struct {
	Argv    []string `json:"argv"`
	Cwd     string   `json:"cwd,omitempty"`
	EnvKeys []string `json:"env_keys,omitempty"`
	User    string   `json:"user,omitempty"`
	TTY     bool     `json:"tty,omitempty"`
	Rows    uint16   `json:"rows,omitempty"`
	Cols    uint16   `json:"cols,omitempty"`
}

// ProcRef is the start data of the process ops that name a process
// (proc_read, proc_exit) and of proc_write, which counts what it writes:
// stdin is never recorded.
type ProcRef struct {
	ProcessID  int64 `json:"process_id"`
	InputBytes int   `json:"input_bytes,omitempty"`
	CloseStdin bool  `json:"close_stdin,omitempty"`
}

// ProcUpdate is the finish data of proc_start, proc_write and proc_read:
// how much output the reply carried (the output itself goes where the
// capture policy puts exec's) and whether the process still runs.
type ProcUpdate struct {
	ProcessID    int64 `json:"process_id"`
	OutputBytes  int64 `json:"output_bytes"`
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
	Running      bool  `json:"running"`
	ExitCode     *int  `json:"exit_code,omitempty"`
}

// ProcResizeStart is the start data of proc_resize.
type ProcResizeStart struct {
	ProcessID int64  `json:"process_id"`
	Rows      uint16 `json:"rows"`
	Cols      uint16 `json:"cols"`
}

// ProcSignalStart is the start data of proc_signal.
type ProcSignalStart struct {
	ProcessID int64  `json:"process_id"`
	Signal    string `json:"signal"`
}

// ProcExitFinish is the finish data of proc_exit, which the node records
// when a process has ended: its exit code (none when it was lost) and why
// it ended: exited (by itself), killed (a signal someone sent), stopped
// (the session stopped or shut down), reaped (idle past the node's
// limit, or pushed out by the session's process limit) or lost (the node
// restarted while it ran).
type ProcExitFinish struct {
	ProcessID   int64  `json:"process_id"`
	ExitCode    *int   `json:"exit_code,omitempty"`
	Reason      string `json:"reason"`
	OutputBytes int64  `json:"output_bytes"`
	// Changes is what the process changed in the workspace from its start
	// to its exit, as a watch saw it (see ExecFinish.Changes).
	Changes *commands.Changes `json:"changes,omitempty"`
}

// EgressStart is the start data of egress, which the node records for
// each connection a sandbox with the allow policy asks its egress proxy
// for: what was asked, the decision, and (when records were being
// dropped) how many refused connections went unrecorded since the last
// record (see docs/security.md, "Egress").
type EgressStart struct {
	egress.Decision
	// Unrecorded counts the refused connections the session's record
	// budget dropped since its previous egress record.
	Unrecorded int64 `json:"unrecorded,omitempty"`
}

// EgressFinish is the finish data of an allowed egress connection: the
// bytes it carried each way. A refused one finishes failed, with
// policy_denied and the reason.
type EgressFinish = egress.Traffic

// NodeLostStart is the start data of node_lost, which the engine records
// on each session of a node it declared lost: the node, the session's
// epoch there, and when the node was last heard from.
type NodeLostStart struct {
	Node     string    `json:"node"`
	Epoch    uint64    `json:"epoch"`
	LastSeen time.Time `json:"last_seen"`
}

// NodeLostFinish is the finish data of node_lost: the snapshot a resume
// would restore (none: only a resume with empty can bring the session
// back), and operations and processes the node left open, which the
// engine recorded as failed (their finishes, and proc_exit lost, come
// just before).
type NodeLostFinish struct {
	SnapshotID string  `json:"snapshot_id,omitempty"`
	ClosedOps  int     `json:"closed_ops,omitempty"`
	Processes  []int64 `json:"processes,omitempty"`
}

// NodeLost is the data of a node's lost event, which an engine records
// (and signs) when the node missed its heartbeats past the engine's TTL:
// who declared it, with which key (audit verify trusts that key for the
// events this engine writes), when the node was last heard from, and how
// many sessions it held.
type NodeLost struct {
	By         string    `json:"by"`
	SigningKey string    `json:"signing_key,omitempty"`
	LastSeen   time.Time `json:"last_seen"`
	TTLMS      int64     `json:"ttl_ms"`
	Sessions   int       `json:"sessions"`
}

// NewData returns a pointer to a new value of the data type of op's
// events in phase, or nil when that phase carries no data (the start of
// running and of the lifecycle ops, the finish of mkdir).
func NewData(op string, phase Phase) any {
	start := phase == PhaseStart
	switch commands.Op(op) {
	case commands.OpCreate:
		if start {
			return new(CreateStart)
		}
		return new(StatusFinish)
	case commands.OpExec:
		if start {
			return new(ExecStart)
		}
		return new(ExecFinish)
	case commands.OpRead:
		if start {
			return new(PathStart)
		}
		return new(ReadFinish)
	case commands.OpWrite:
		if start {
			return new(WriteStart)
		}
		return new(WriteFinish)
	case commands.OpLs:
		if start {
			return new(LsStart)
		}
		return new(LsFinish)
	case commands.OpRm:
		if start {
			return new(RmStart)
		}
		return new(RmFinish)
	case commands.OpMkdir:
		if start {
			return new(MkdirStart)
		}
		return new(MkdirFinish)
	case commands.OpRunning:
		if !start {
			return new(RunningFinish)
		}
	case commands.OpStart, commands.OpShutdown, commands.OpDelete:
		if !start {
			return new(StatusFinish)
		}
	case commands.OpStop, commands.OpPersist:
		if !start {
			return new(SnapshotFinish)
		}
	case commands.OpHydrate:
		if start {
			return new(HydrateStart)
		}
		return new(HydrateFinish)
	case commands.OpResume:
		if start {
			return new(ResumeStart)
		}
		return new(ResumeFinish)
	case commands.OpProcStart:
		if start {
			return new(ProcStart)
		}
		return new(ProcUpdate)
	case commands.OpProcWrite, commands.OpProcRead:
		if start {
			return new(ProcRef)
		}
		return new(ProcUpdate)
	case commands.OpProcResize:
		if start {
			return new(ProcResizeStart)
		}
	case commands.OpProcSignal:
		if start {
			return new(ProcSignalStart)
		}
	case commands.OpExecRead:
		if start {
			return new(ExecReadStart)
		}
		return new(ExecReadFinish)
	case commands.OpPort:
		if start {
			return new(PortStart)
		}
		return new(PortFinish)
	case commands.OpProcExit:
		if start {
			return new(ProcRef)
		}
		return new(ProcExitFinish)
	case commands.OpNodeLost:
		if start {
			return new(NodeLostStart)
		}
		return new(NodeLostFinish)
	case commands.OpEgress:
		if start {
			return new(EgressStart)
		}
		return new(EgressFinish)
	case commands.OpFork:
		if start {
			return new(ForkStart)
		}
		return new(ForkFinish)
	case commands.OpCheckpoint:
		if start {
			return new(CheckpointStart)
		}
		return new(SnapshotFinish)
	}
	return nil
}

// DecodeData decodes ev's data into a T. Empty data decodes as T's zero
// value.
func DecodeData[T any](ev Event) (T, error) {
	var v T
	if len(ev.Data) == 0 || string(ev.Data) == "null" {
		return v, nil
	}
	if err := json.Unmarshal(ev.Data, &v); err != nil {
		return v, fmt.Errorf("decode %s %s data at seq %d: %w", ev.Op, ev.Phase, ev.Seq, err)
	}
	return v, nil
}
