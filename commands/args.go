package commands

import (
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/errcode"
)

// Limits on create specs.
const (
	MaxEnvVars = 1024
	MaxLabels  = 256
	// MaxNodeLabels bounds CreateArgs.NodeLabels.
	MaxNodeLabels = 16
	MaxCPUs       = 256
	MaxMemory     = 1 << 40 // 1 TiB
	MaxPids       = 1 << 22
	// MinDisk and MaxDisk bound CreateArgs.DiskBytes (when set): a
	// sandbox's file system needs room for its own metadata, and no
	// node has a petabyte to give one sandbox.
	MinDisk      = 16 << 20 // 16 MiB
	MaxDisk      = 1 << 50  // 1 PiB
	MaxExecArgs  = 4096
	MaxTimeout   = 24 * time.Hour
	DefaultImage = "paddock/sandbox-base:test"
)

// CreateArgs is the spec of a new session (op create).
type CreateArgs struct {
	// SessionID is optional; the scheduler assigns a UUID when it is empty.
	// A session id is never reused: creating an existing or deleted id fails
	// with already_exists.
	SessionID string `json:"session_id,omitempty"`
	// Runtime is "local", "docker", "gvisor" (Docker under gVisor's runsc),
	// "runsc" (gVisor run by runsc directly: memory checkpoints) or empty
	// for any runtime a node offers.
	Runtime string `json:"runtime,omitempty"`
	// Image is the container image (docker and gvisor runtimes only).
	Image string `json:"image,omitempty"`
	// Env is given to every process of the session and recorded in events.
	Env map[string]string `json:"env,omitempty"`
	// SecretEnv is given to every process but its values never appear in an
	// event, reply or log: they are redacted from captured output.
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	// Labels are free key/value tags recorded with the session.
	Labels map[string]string `json:"labels,omitempty"`
	// NodeLabels (1.2) places the session only on a node whose labels
	// (agent-node --labels) include every one of these.
	NodeLabels map[string]string `json:"node_labels,omitempty"`
	// CPUs and MemoryBytes limit the sandbox (0: the node's default).
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	// DiskBytes (1.5) bounds everything the sandbox can write: its
	// workspace, /tmp and any other writable place (0: the node's
	// default). Writing past it fails inside the sandbox with ENOSPC.
	// More than the operator's maximum is policy_denied. The create's
	// finish event says how the node enforces it (disk_limit).
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// WorkspaceRoot is the workspace directory as the sandbox sees it
	// (default /workspace).
	WorkspaceRoot string `json:"workspace_root,omitempty"`
	// Network gives the sandbox a network (docker runtime: the default
	// bridge). Without it the sandbox has none.
	Network bool `json:"network,omitempty"`
	// User runs the sandbox's processes as this user ("uid", "uid:gid" or a
	// name the image knows). Empty means the runtime's non-root default;
	// root must be asked for explicitly ("0" or "root").
	User string `json:"user,omitempty"`
	// PidsLimit caps the number of processes in the sandbox (0: the node's
	// default).
	PidsLimit int64 `json:"pids_limit,omitempty"`
	// LifetimeS is how long the session may live, in seconds from its
	// create (0: the operator's default, none unless set). Past it the node
	// shuts the session down (recorded with reason max_lifetime) and it
	// cannot be started or resumed again. More than the operator's
	// maximum is policy_denied.
	LifetimeS int64 `json:"lifetime_s,omitempty"`
	// IdleTimeoutS (1.3) stops the session (persisting its workspace
	// first) after this many seconds with no operation and no running
	// process (0: the operator's default). More than the operator's
	// maximum is policy_denied.
	IdleTimeoutS int64 `json:"idle_timeout_s,omitempty"`
	// MaxProcesses bounds the processes (proc_start) the session holds at
	// once, running or exited and not yet read (0: the node's default, 16;
	// at most MaxProcesses).
	MaxProcesses int `json:"max_processes,omitempty"`
	// Manifest lists files and directories to materialise in the workspace
	// when the sandbox is created.
	Manifest []ManifestEntry `json:"manifest,omitempty"`
	// ExposedPorts (1.3) are ports inside the sandbox that clients may
	// reach: op port returns an address on the node for each. Exposing a
	// port gives the sandbox no network: its egress stays as asked.
	ExposedPorts []int `json:"exposed_ports,omitempty"`
	// Egress (1.4) is the sandbox's outbound network policy (see Egress);
	// absent, Network decides: open with it, none without.
	Egress *Egress `json:"egress,omitempty"`
}

// ManifestEntry is a file or directory a create materialises. The create
// event records its path, size, digest, mode and flags, never its content.
type ManifestEntry struct {
	// Path is a workspace path.
	Path string `json:"path"`
	// Dir makes a directory (with parents) instead of a file.
	Dir     bool   `json:"dir,omitempty"`
	Content []byte `json:"content,omitempty"`
	// Mode of the file (0: 0644).
	Mode uint32 `json:"mode,omitempty"`
	// Ephemeral entries are materialised but never persisted: snapshots
	// leave them (and, for a directory, everything in it) out.
	Ephemeral bool `json:"ephemeral,omitempty"`
}

// MaxManifestEntries bounds a create's manifest.
const MaxManifestEntries = 1000

// MaxLifetimeS bounds CreateArgs.LifetimeS: a year.
const MaxLifetimeS = 366 * 24 * 3600

// Validate checks the spec's values and returns an invalid_request error
// naming the first bad one.
func (a *CreateArgs) Validate() error {
	if a.SessionID != "" {
		if err := CheckToken("session_id", a.SessionID); err != nil {
			return err
		}
	}
	switch a.Runtime {
	case "", "local", "docker", "gvisor", "runsc":
	default:
		return errcode.New(errcode.InvalidRequest, "runtime %q is not one of local, docker, gvisor, runsc", a.Runtime)
	}
	if len(a.Env)+len(a.SecretEnv) > MaxEnvVars {
		return errcode.New(errcode.InvalidRequest, "more than %d environment variables", MaxEnvVars)
	}
	if a.LifetimeS < 0 || a.LifetimeS > MaxLifetimeS {
		return errcode.New(errcode.InvalidRequest, "lifetime_s %d is outside 0..%d", a.LifetimeS, MaxLifetimeS)
	}
	if a.IdleTimeoutS < 0 || a.IdleTimeoutS > MaxLifetimeS {
		return errcode.New(errcode.InvalidRequest, "idle_timeout_s %d is outside 0..%d", a.IdleTimeoutS, MaxLifetimeS)
	}
	if a.MaxProcesses < 0 || a.MaxProcesses > MaxProcesses {
		return errcode.New(errcode.InvalidRequest, "max_processes %d is outside 0..%d", a.MaxProcesses, MaxProcesses)
	}
	if err := checkEnv(a.Env); err != nil {
		return err
	}
	if err := checkEnv(a.SecretEnv); err != nil {
		return err
	}
	if err := checkSecrets(a.SecretEnv); err != nil {
		return err
	}
	for k := range a.SecretEnv {
		if _, dup := a.Env[k]; dup {
			return errcode.New(errcode.InvalidRequest, "env %q is given both as env and secret env", k)
		}
	}
	if len(a.Labels) > MaxLabels {
		return errcode.New(errcode.InvalidRequest, "more than %d labels", MaxLabels)
	}
	if len(a.NodeLabels) > MaxNodeLabels {
		return errcode.New(errcode.InvalidRequest, "more than %d node labels", MaxNodeLabels)
	}
	for k, v := range a.NodeLabels {
		if k == "" || len(k) > 128 || len(v) > 1024 || strings.ContainsAny(k, "=,\x00") || strings.ContainsAny(v, ",\x00") {
			return errcode.New(errcode.InvalidRequest, "node label %q: a key of 1 to 128 bytes without '=', ',' or NUL, a value of at most 1024 bytes without ',' or NUL", clip(k, 64))
		}
	}
	for k := range a.Labels {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errcode.New(errcode.InvalidRequest, "label key %q is empty or contains '=' or NUL", k)
		}
	}
	if a.CPUs < 0 || a.CPUs > MaxCPUs {
		return errcode.New(errcode.InvalidRequest, "cpus %v is outside 0..%d", a.CPUs, MaxCPUs)
	}
	if a.MemoryBytes < 0 || a.MemoryBytes > MaxMemory {
		return errcode.New(errcode.InvalidRequest, "memory %d is outside 0..%d bytes", a.MemoryBytes, int64(MaxMemory))
	}
	if a.MemoryBytes > 0 && a.MemoryBytes < 4<<20 {
		return errcode.New(errcode.InvalidRequest, "memory %d is below the 4 MiB minimum", a.MemoryBytes)
	}
	if a.DiskBytes != 0 && (a.DiskBytes < MinDisk || a.DiskBytes > MaxDisk) {
		return errcode.New(errcode.InvalidRequest, "disk_bytes %d is outside %d..%d (0: the node's default)", a.DiskBytes, int64(MinDisk), int64(MaxDisk))
	}
	if len(a.Manifest) > MaxManifestEntries {
		return errcode.New(errcode.InvalidRequest, "more than %d manifest entries", MaxManifestEntries)
	}
	total := 0
	for _, e := range a.Manifest {
		if e.Path == "" || len(e.Path) > MaxPathLen || strings.HasPrefix(e.Path, "/") || strings.ContainsRune(e.Path, 0) || e.Mode&^0o7777 != 0 || (e.Dir && len(e.Content) > 0) {
			return errcode.New(errcode.InvalidRequest, "manifest entry %q: want a relative path, mode bits only, and no content for a directory", clip(e.Path, 64))
		}
		total += len(e.Content)
	}
	if total > InlineLimit {
		return errcode.New(errcode.PayloadTooLarge, "manifest content of %d bytes exceeds %d; write larger files after create", total, InlineLimit)
	}
	if a.PidsLimit < 0 || a.PidsLimit > MaxPids {
		return errcode.New(errcode.InvalidRequest, "pids_limit %d is outside 0..%d", a.PidsLimit, MaxPids)
	}
	if err := checkUser(a.User); err != nil {
		return err
	}
	if err := checkExposedPorts(a.ExposedPorts); err != nil {
		return err
	}
	if a.Egress != nil {
		if err := a.Egress.Validate(); err != nil {
			return err
		}
		if a.Network && a.Egress.Mode != "open" {
			return errcode.New(errcode.InvalidRequest, "network true asks for egress open, and egress asks for %s: send one", a.Egress.Mode)
		}
	}
	if a.Image != "" && (len(a.Image) > 255 || strings.ContainsFunc(a.Image, func(r rune) bool { return r <= ' ' || r == 0x7f })) {
		return errcode.New(errcode.InvalidRequest, "image %q is longer than 255 bytes or has spaces or control characters", clip(a.Image, 64))
	}
	for k, v := range a.Labels {
		if len(k) > 128 || len(v) > 1024 {
			return errcode.New(errcode.InvalidRequest, "label %q: keys are at most 128 bytes, values 1024", clip(k, 64))
		}
	}
	if a.WorkspaceRoot != "" && (len(a.WorkspaceRoot) > 255 || !strings.HasPrefix(a.WorkspaceRoot, "/") || a.WorkspaceRoot == "/" || strings.Contains(a.WorkspaceRoot, "..") || strings.ContainsRune(a.WorkspaceRoot, 0)) {
		return errcode.New(errcode.InvalidRequest, "workspace_root %q must be an absolute directory other than /", a.WorkspaceRoot)
	}
	return nil
}

func checkUser(u string) error {
	if len(u) > 64 || strings.ContainsFunc(u, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return errcode.New(errcode.InvalidRequest, "user %q is longer than 64 bytes or has spaces or control characters", u)
	}
	return nil
}

// MinSecretBytes is the shortest secret value a session takes. Every
// occurrence of a secret is redacted from what is recorded and replied,
// so a shorter one ("1", "yes") would blot out ordinary output and leak
// nothing worth hiding.
const MinSecretBytes = 6

// checkSecrets refuses secret values shorter than MinSecretBytes.
func checkSecrets(env map[string]string) error {
	for k, v := range env {
		if len(v) < MinSecretBytes {
			return errcode.New(errcode.InvalidRequest, "secret env %s: a secret value must be at least %d bytes (every occurrence of it is redacted from output and events)", k, MinSecretBytes)
		}
	}
	return nil
}

func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errcode.New(errcode.InvalidRequest, "env name %q is empty or contains '=' or NUL", k)
		}
		if strings.ContainsRune(v, 0) {
			return errcode.New(errcode.InvalidRequest, "env %q has a NUL byte in its value", k)
		}
	}
	return nil
}

// Placement is what the scheduler sends to the chosen node's create subject.
type Placement struct {
	Tenant    string     `json:"tenant"`
	SessionID string     `json:"session_id"`
	Spec      CreateArgs `json:"spec"`
	// Parent is set only by the scheduler's fork: the child's workspace
	// is the parent's snapshot, and its create records where it came
	// from. A tenant's create never carries it.
	Parent *Parent `json:"parent,omitempty"`
}

// CreateResult answers create.
type CreateResult struct {
	SessionID string `json:"session_id"`
	Node      string `json:"node"`
	Runtime   string `json:"runtime"`
	Status    string `json:"status"`
}

// ExecArgs runs a command in the session (op exec). Exactly one of Argv and
// Shell is set; Shell runs through /bin/sh -c.
type ExecArgs struct {
	Argv  []string `json:"argv,omitempty"`
	Shell string   `json:"shell,omitempty"`
	// TimeoutMS kills the command's whole process group after this long
	// (0: the node's default, 10 minutes).
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	// Cwd is a workspace path (default: the workspace root).
	Cwd string `json:"cwd,omitempty"`
	// User runs this command as another user than the session's (docker
	// runtime only).
	User string `json:"user,omitempty"`
	// MaxOutputBytes caps stdout and stderr each in the reply, after
	// secrets are redacted (0: MaxOutputBytes, the most allowed).
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// Stream makes all the output readable while the command runs, with
	// exec_read under the request's command id (which must be set). The
	// node holds a bounded amount nobody has read: a reader that falls
	// behind slows the command down; one that stops reading for long is
	// dropped and the command goes on with only its reply's output.
	Stream bool `json:"stream,omitempty"`
}

// Validate checks the exec arguments.
func (a *ExecArgs) Validate() error {
	if (len(a.Argv) == 0) == (a.Shell == "") {
		return errcode.New(errcode.InvalidRequest, "exactly one of argv and shell must be set")
	}
	if len(a.Argv) > MaxExecArgs {
		return errcode.New(errcode.InvalidRequest, "more than %d arguments", MaxExecArgs)
	}
	if len(a.Argv) > 0 && a.Argv[0] == "" {
		return errcode.New(errcode.InvalidRequest, "argv[0] is empty")
	}
	for _, s := range append(a.Argv, a.Shell) {
		if strings.ContainsRune(s, 0) {
			return errcode.New(errcode.InvalidRequest, "argument contains a NUL byte")
		}
	}
	// Compared in milliseconds: a huge value must not overflow into a
	// negative time.Duration on its way to a check.
	if a.TimeoutMS < 0 || a.TimeoutMS > MaxTimeout.Milliseconds() {
		return errcode.New(errcode.InvalidRequest, "timeout_ms %d is outside 0..%d", a.TimeoutMS, MaxTimeout.Milliseconds())
	}
	if a.MaxOutputBytes < 0 || a.MaxOutputBytes > MaxOutputBytes {
		return errcode.New(errcode.InvalidRequest, "max_output_bytes %d is outside 0..%d", a.MaxOutputBytes, MaxOutputBytes)
	}
	if err := checkUser(a.User); err != nil {
		return err
	}
	if len(a.Env) > MaxEnvVars {
		return errcode.New(errcode.InvalidRequest, "more than %d environment variables", MaxEnvVars)
	}
	if a.Cwd != "" {
		if err := checkPath(a.Cwd); err != nil {
			return err
		}
	}
	return checkEnv(a.Env)
}

// ExecResult answers exec. A command that ran answers with its exit code
// whatever it is (its finish event says ok only for exit code 0, as the
// OpenAI Agents SDK's ExecResult.ok() does); only a failure to run it is an
// error. Stdout and Stderr follow the output encoding rule (see Output):
// the text itself when the kept bytes are valid UTF-8, else base64 with
// StdoutEncoding (StderrEncoding) "base64".
type ExecResult struct {
	ExitCode        int     `json:"exit_code"`
	Stdout          string  `json:"stdout,omitempty"`
	StdoutEncoding  string  `json:"stdout_encoding,omitempty"`
	Stderr          string  `json:"stderr,omitempty"`
	StderrEncoding  string  `json:"stderr_encoding,omitempty"`
	StdoutBytes     int64   `json:"stdout_bytes"`
	StderrBytes     int64   `json:"stderr_bytes"`
	StdoutTruncated bool    `json:"stdout_truncated,omitempty"`
	StderrTruncated bool    `json:"stderr_truncated,omitempty"`
	DurationMS      float64 `json:"duration_ms"`
}

// StdoutBytesKept returns the kept stdout as bytes, decoding base64 when
// StdoutEncoding says so; malformed base64 is invalid_request.
func (r ExecResult) StdoutBytesKept() ([]byte, error) {
	return DecodeOutput(r.Stdout, r.StdoutEncoding)
}

// StderrBytesKept is StdoutBytesKept for stderr.
func (r ExecResult) StderrBytesKept() ([]byte, error) {
	return DecodeOutput(r.Stderr, r.StderrEncoding)
}

// ReadArgs reads one file (op read).
type ReadArgs struct {
	Path string `json:"path"`
}

// Validate checks the read arguments.
func (a *ReadArgs) Validate() error { return checkPath(a.Path) }

// LsArgs lists a directory (op ls), a page at a time: entries sorted by
// name, at most Limit of them, starting after the name After.
type LsArgs struct {
	Path string `json:"path"`
	// Limit is the most entries one reply carries (0: DefaultLsLimit; at
	// most MaxLsLimit).
	Limit int `json:"limit,omitempty"`
	// After continues a listing: only names greater than After (byte
	// order) come. Pass the Next of the previous page.
	After string `json:"after,omitempty"`
}

// Page sizes of ls: a page of the largest names still fits a reply.
const (
	DefaultLsLimit = 1000
	MaxLsLimit     = 1000
)

// Validate checks the ls arguments.
func (a *LsArgs) Validate() error {
	if a.Limit < 0 || a.Limit > MaxLsLimit {
		return errcode.New(errcode.InvalidRequest, "limit %d is outside 0..%d", a.Limit, MaxLsLimit)
	}
	if len(a.After) > MaxPathLen {
		return errcode.New(errcode.InvalidRequest, "after is longer than %d bytes", MaxPathLen)
	}
	return checkPath(a.Path)
}

// MaxPathLen bounds a workspace path on the wire (the kernel's PATH_MAX).
const MaxPathLen = 4096

// checkPath refuses what no runtime could take as a path; confinement to
// the workspace is the runtime's check (runtime.Rel and then its own).
func checkPath(p string) error {
	if len(p) > MaxPathLen {
		return errcode.New(errcode.InvalidPath, "path is longer than %d bytes", MaxPathLen)
	}
	if strings.ContainsRune(p, 0) {
		return errcode.New(errcode.InvalidPath, "path contains a NUL byte")
	}
	return nil
}

// ReadResult answers read.
type ReadResult struct {
	Content []byte `json:"content"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	// Download names a temporary object of the workspace bucket that holds
	// the content of a file over the inline limit (Content is then empty);
	// the reader fetches and deletes it.
	Download string `json:"download,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
}

// WriteArgs writes a whole file (op write), creating missing parent
// directories. Mode 0 means 0644.
type WriteArgs struct {
	Path    string `json:"path"`
	Content []byte `json:"content,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
	// Upload names a temporary object of the workspace bucket holding the
	// content of a file over the inline limit, Size bytes long; the node
	// deletes it once written.
	Upload string `json:"upload,omitempty"`
	Size   int64  `json:"size,omitempty"`
}

// Validate checks the write arguments.
func (a *WriteArgs) Validate() error {
	if err := checkPath(a.Path); err != nil {
		return err
	}
	if len(a.Content) > InlineLimit {
		return errcode.New(errcode.PayloadTooLarge, "content of %d bytes exceeds the inline limit of %d; send it as an upload", len(a.Content), InlineLimit)
	}
	if a.Upload != "" && (len(a.Content) > 0 || a.Size < 0 || a.Size > MaxFileBytes) {
		return errcode.New(errcode.InvalidRequest, "an upload takes no inline content and a size within 0..%d", int64(MaxFileBytes))
	}
	if a.Upload == "" && a.Size != 0 {
		return errcode.New(errcode.InvalidRequest, "size is for uploads; inline content has its own length")
	}
	if a.Upload != "" && len(a.Upload) > 512 {
		return errcode.New(errcode.InvalidRequest, "upload name is longer than 512 bytes")
	}
	if a.Mode&^0o7777 != 0 {
		return errcode.New(errcode.InvalidRequest, "mode %o has bits outside 07777", a.Mode)
	}
	return nil
}

// WriteResult answers write.
type WriteResult struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Entry is one ls entry.
type Entry struct {
	Name string `json:"name"`
	// Type is file, dir, symlink or other.
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode is the permission bits as an integer (0o644 is 420).
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mtime"`
}

// LsResult answers ls with one page of entries.
type LsResult struct {
	Entries []Entry `json:"entries"`
	// Next is set when more entries follow: send it as After.
	Next string `json:"next,omitempty"`
}

// RmArgs removes a path (op rm); a non-empty directory needs Recursive. A
// missing path is not_found unless Force is set, when it succeeds (as
// rm -f does).
type RmArgs struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
	Force     bool   `json:"force,omitempty"`
}

// Validate checks the rm arguments.
func (a *RmArgs) Validate() error { return checkPath(a.Path) }

// MkdirArgs makes a directory (op mkdir); Parents makes missing parents and
// accepts an existing directory.
type MkdirArgs struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
}

// Validate checks the mkdir arguments.
func (a *MkdirArgs) Validate() error { return checkPath(a.Path) }

// RunningResult answers running.
type RunningResult struct {
	Running bool `json:"running"`
}

// StatusResult answers start, stop, shutdown and delete.
type StatusResult struct {
	Status string `json:"status"`
}

// LookupArgs asks the engine about a session that did not answer.
type LookupArgs struct {
	SessionID string `json:"session_id"`
}

// Validate checks the lookup arguments.
func (a *LookupArgs) Validate() error { return CheckToken("session_id", a.SessionID) }

// DeleteRequest is what a client sends to the scheduler's delete subject
// (1.2) when the session's own subject has no responder.
type DeleteRequest struct {
	SessionID string `json:"session_id"`
}

// Validate checks the request.
func (a *DeleteRequest) Validate() error { return CheckToken("session_id", a.SessionID) }

// LookupResult answers lookup; an unknown or deleted session is a
// session_not_found error instead.
type LookupResult struct {
	Status string `json:"status"`
	Node   string `json:"node"`
}

// sessionIDSpace is the namespace of session ids derived from command ids.
var sessionIDSpace = uuid.MustParse("6c1f4a52-5e5b-4a8e-9a57-2a4f1f0f7d31")

// SessionIDFor returns the session id a create that names none gets: a
// name-based (SHA-1) UUID of the tenant and the create's command id. A
// create retried with the same command id, through any scheduler, so names
// the same session, and the node finds the first attempt's events instead
// of making a second sandbox.
func SessionIDFor(tenant, commandID string) string {
	return uuid.NewSHA1(sessionIDSpace, []byte(tenant+"\x00"+commandID)).String()
}
