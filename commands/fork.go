package commands

import "github.com/paddock-dev/paddock/errcode"

// OpFork branches a session: on the tenant's subject the scheduler
// serves it (ForkRequest → ForkResult); on the parent's own subject the
// node that serves the parent records the fork point (ForkArgs →
// ForkPoint), sent only by the scheduler.
const OpFork Op = "fork"

// MaxForks is the most children one fork may ask for, whatever the
// operator allows (the scheduler's own maximum is at most this).
const MaxForks = 100

// ForkRequest is what a client sends to the scheduler's fork subject: N
// new sessions with the parent's workspace at one recorded point, its
// image, limits, egress policy and environment.
type ForkRequest struct {
	SessionID string `json:"session_id"`
	// N is how many children to make (1..the operator's maximum, at most
	// MaxForks).
	N int `json:"n"`
	// SnapshotID names a snapshot the parent's history recorded; AtSeq
	// picks the last one recorded at or before that seq of the parent.
	// At most one; with neither the parent persists first.
	SnapshotID string `json:"snapshot_id,omitempty"`
	AtSeq      uint64 `json:"at_seq,omitempty"`
	// SecretEnv gives the children secret values: a child gets none of
	// the parent's unless the caller gives them again.
	SecretEnv map[string]string `json:"secret_env,omitempty"`
}

// Validate checks the request's shape; the scheduler checks N against
// its own maximum.
func (r *ForkRequest) Validate() error {
	if err := CheckToken("session_id", r.SessionID); err != nil {
		return err
	}
	if r.N < 1 {
		return errcode.New(errcode.InvalidRequest, "n %d: a fork makes at least one child", r.N)
	}
	if r.N > MaxForks {
		return errcode.New(errcode.PolicyDenied, "n %d is more than the %d children a fork may make", r.N, MaxForks)
	}
	if err := checkForkPoint(r.SnapshotID, r.AtSeq); err != nil {
		return err
	}
	if err := checkEnv(r.SecretEnv); err != nil {
		return err
	}
	if len(r.SecretEnv) > MaxEnvVars {
		return errcode.New(errcode.InvalidRequest, "more than %d secret variables", MaxEnvVars)
	}
	return checkSecrets(r.SecretEnv)
}

func checkForkPoint(snapshotID string, atSeq uint64) error {
	if snapshotID != "" && atSeq != 0 {
		return errcode.New(errcode.InvalidRequest, "give snapshot_id or at_seq, not both")
	}
	if snapshotID != "" {
		return CheckToken("snapshot_id", snapshotID)
	}
	return nil
}

// ForkResult answers a fork: the children that came up, the point they
// came from, and the children that did not.
type ForkResult struct {
	Children []string      `json:"children"`
	Parent   Parent        `json:"parent"`
	Failed   []ForkFailure `json:"failed,omitempty"`
}

// ForkFailure is a child the scheduler drew but could not bring up: its
// session id (recorded in the parent's fork) and why.
type ForkFailure struct {
	SessionID string     `json:"session_id"`
	Error     *WireError `json:"error"`
}

// ForkArgs is the session op fork the scheduler sends to the parent's
// node: record the fork of the parent into Children at a snapshot (the
// parent's own, by id or by seq; with neither, the node persists first).
type ForkArgs struct {
	Children   []string `json:"children"`
	SnapshotID string   `json:"snapshot_id,omitempty"`
	AtSeq      uint64   `json:"at_seq,omitempty"`
}

// Validate checks the args.
func (a *ForkArgs) Validate() error {
	if len(a.Children) < 1 || len(a.Children) > MaxForks {
		return errcode.New(errcode.InvalidRequest, "a fork records 1..%d children, not %d", MaxForks, len(a.Children))
	}
	seen := make(map[string]bool, len(a.Children))
	for _, c := range a.Children {
		if err := CheckToken("child session_id", c); err != nil {
			return err
		}
		if seen[c] {
			return errcode.New(errcode.InvalidRequest, "child %s is named twice", c)
		}
		seen[c] = true
	}
	return checkForkPoint(a.SnapshotID, a.AtSeq)
}

// ForkPoint answers the session op fork: the point the children come
// from.
type ForkPoint struct {
	Parent Parent `json:"parent"`
}

// LineageRoot is the root digest a Parent names for snap: the manifest's
// root for a content-addressed snapshot, the tar's sha256 for a tar
// snapshot (which has no manifest).
func LineageRoot(snap *Snapshot) string {
	if snap == nil {
		return ""
	}
	if snap.RootSHA256 != "" {
		return snap.RootSHA256
	}
	return snap.SHA256
}
