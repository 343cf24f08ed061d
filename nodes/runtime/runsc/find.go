package runsc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// RecordFile is the file in a sandbox's directory that records what
// FindSandboxes needs to drive the sandbox again after the node restarted.
// It holds the sandbox's environment, secret values included: it is 0600
// in the node's own 0700 directory, which no sandbox mounts.
const RecordFile = "sandbox.json"

// recordVersion is RecordFile's format.
const recordVersion = 1

// record is a sandbox's RecordFile.
type record struct {
	Version   int       `json:"version"`
	Tenant    string    `json:"tenant"`
	SessionID string    `json:"session_id"`
	Epoch     uint64    `json:"epoch"`
	Created   time.Time `json:"created"`
	// ContainerID is the container's id under the sandbox's runsc root
	// (a restored sandbox's own, not the checkpointed one's).
	ContainerID   string            `json:"container_id"`
	Image         string            `json:"image"`
	User          string            `json:"user"`
	WorkspaceRoot string            `json:"workspace_root"`
	Env           map[string]string `json:"env,omitempty"`
}

var _ interface {
	FindSandboxes(ctx context.Context) ([]runtime.Found, error)
} = (*Runtime)(nil)

// writeRecord writes sb's RecordFile atomically (a temporary file renamed
// over it), so that a reader finds the whole record or none.
func writeRecord(sb *Sandbox, spec runtime.Spec) error {
	rec := record{
		Version: recordVersion, Tenant: spec.Tenant, SessionID: spec.SessionID, Epoch: spec.Epoch,
		Created: time.Now().UTC(), ContainerID: sb.id, Image: sb.image,
		User: strconv.Itoa(sb.uid) + ":" + strconv.Itoa(sb.gid), WorkspaceRoot: sb.vroot, Env: sb.env,
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return errcode.Wrap(errcode.Internal, err, "encode the sandbox's record")
	}
	tmp, err := os.CreateTemp(sb.dir, RecordFile+".*.tmp")
	if err != nil {
		return errcode.Wrap(errcode.RuntimeError, err, "write the sandbox's record")
	}
	_, err = tmp.Write(data)
	if serr := tmp.Sync(); err == nil {
		err = serr
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(sb.dir, RecordFile))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return errcode.Wrap(errcode.RuntimeError, err, "write the sandbox's record")
	}
	return nil
}

// errUnknownVersion marks a record of a format this node does not read.
var errUnknownVersion = errors.New("unknown record version")

// readRecord reads and checks a sandbox directory's RecordFile.
func readRecord(dir string) (record, error) {
	data, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err != nil {
		return record{}, err
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return record{}, err
	}
	if rec.Version != recordVersion {
		return record{}, fmt.Errorf("%w %d", errUnknownVersion, rec.Version)
	}
	if rec.Tenant == "" || rec.SessionID == "" || rec.ContainerID == "" || rec.Image == "" ||
		!filepath.IsAbs(rec.WorkspaceRoot) || strings.ContainsAny(rec.ContainerID, "/\x00") {
		return record{}, errors.New("incomplete record")
	}
	return rec, nil
}

// FindSandboxes returns the sandboxes under the runtime's directory,
// running or not, so that a restarted node agent can serve them again or
// reap them. Each Found carries the sandbox's environment (secrets
// included) and a Sandbox that drives it as the one Create (or Restore)
// returned does; a sandbox this runtime already drives is returned as that
// same Sandbox. A directory whose record is missing or malformed (a
// create cut short before it wrote one, or a damaged file) is no sandbox
// the node could serve: its containers are killed and deleted and the
// directory removed, here (its workspace, which the record would have
// named, is left). A record of another format version is left alone (a
// newer node's). Listing the directory fails with runtime_error.
func (r *Runtime) FindSandboxes(ctx context.Context) ([]runtime.Found, error) {
	r.findMu.Lock()
	defer r.findMu.Unlock()
	entries, err := os.ReadDir(filepath.Join(r.cfg.Dir, "sandboxes"))
	if err != nil {
		return nil, errcode.Wrap(errcode.RuntimeError, err, "list the runsc sandboxes")
	}
	var out []runtime.Found
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "sb-") {
			continue
		}
		dir := filepath.Join(r.cfg.Dir, "sandboxes", e.Name())
		r.mu.Lock()
		sb, held := r.held[dir]
		r.mu.Unlock()
		rec, rerr := readRecord(dir)
		switch {
		case held && rerr != nil:
			continue // one in the making
		case errors.Is(rerr, errUnknownVersion):
			continue
		case rerr != nil:
			r.removeLeftover(ctx, dir)
			continue
		case !held:
			if sb, err = r.reopen(ctx, dir, rec); err != nil {
				continue // its workspace is held or gone: not servable now
			}
		}
		running, _ := sb.Running(ctx)
		out = append(out, runtime.Found{
			Tenant: rec.Tenant, SessionID: rec.SessionID, Epoch: rec.Epoch,
			Created: rec.Created, Running: running, Env: rec.Env, Sandbox: sb,
		})
	}
	return out, nil
}

// reopen builds the Sandbox of a directory an earlier run of the node
// made, from its record and runsc's state of its container, and holds it.
func (r *Runtime) reopen(ctx context.Context, dir string, rec record) (*Sandbox, error) {
	uid, gid, err := parseUser(rec.User)
	if err != nil {
		return nil, err
	}
	ws, err := r.ws.Reopen(runtime.Spec{Tenant: rec.Tenant, SessionID: rec.SessionID, WorkspaceRoot: rec.WorkspaceRoot, Env: rec.Env})
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{
		rt: r, ws: ws, dir: dir, id: rec.ContainerID, image: rec.Image,
		uid: uid, gid: gid, vroot: rec.WorkspaceRoot, env: rec.Env,
		// runsc may know the container (Shutdown deletes it whatever its
		// state; a delete of one it does not know is no failure).
		exists: true,
	}
	sb.running = sb.containerRuns(ctx)
	r.mu.Lock()
	r.held[dir] = sb
	r.mu.Unlock()
	return sb, nil
}

// removeLeftover kills and deletes the containers under a sandbox
// directory that has no usable record, removes their cgroups and then the
// directory, best effort. A directory whose runsc root cannot be listed is
// left for a later pass (its processes might live on).
func (r *Runtime) removeLeftover(ctx context.Context, dir string) {
	root := filepath.Join(dir, "root")
	if _, err := os.Stat(root); err == nil {
		out, err := r.runsc(ctx, root, "list", "-quiet")
		if err != nil {
			return
		}
		for _, id := range strings.Fields(string(out)) {
			if _, err := r.runsc(ctx, root, "delete", "--force", id); err != nil {
				return
			}
			removeCgroups(id + "-" + filepath.Base(dir))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return
	}
	_ = os.RemoveAll(dir)
}

// release forgets sb (shut down).
func (r *Runtime) release(sb *Sandbox) {
	r.mu.Lock()
	if r.held[sb.dir] == sb {
		delete(r.held, sb.dir)
	}
	r.mu.Unlock()
}
