package commands

import "github.com/paddock-dev/paddock/errcode"

// OpDiff travels on the tenant's subject (<prefix>.cmd.<tenant>.diff) and
// is served by the engine's scheduler: what changed in a session's
// workspace between two of its recorded snapshots.
const OpDiff Op = "diff"

// Diff bounds.
const (
	// DefaultDiffLimit is how many changes a diff lists when its request
	// sets no limit.
	DefaultDiffLimit = 1000
	// MaxDiffLimit is the most changes a diff lists.
	MaxDiffLimit = 10_000
)

// DiffRequest asks what changed between two recorded points of a
// session. ToSeq 0 is the newest snapshot, else the last snapshot
// recorded at or before ToSeq; FromSeq 0 is the snapshot before To (none:
// an empty workspace), else the last recorded at or before FromSeq (none:
// an empty workspace).
type DiffRequest struct {
	SessionID string `json:"session_id"`
	FromSeq   uint64 `json:"from_seq,omitempty"`
	ToSeq     uint64 `json:"to_seq,omitempty"`
	// Limit bounds Changes (0: DefaultDiffLimit; at most MaxDiffLimit).
	Limit int `json:"limit,omitempty"`
}

// Validate checks the request: a session token, FromSeq not after a set
// ToSeq, and a limit within 0..MaxDiffLimit (invalid_request otherwise).
func (r *DiffRequest) Validate() error {
	if err := CheckToken("session_id", r.SessionID); err != nil {
		return err
	}
	if r.ToSeq != 0 && r.FromSeq > r.ToSeq {
		return errcode.New(errcode.InvalidRequest, "from_seq %d is after to_seq %d", r.FromSeq, r.ToSeq)
	}
	if r.Limit < 0 || r.Limit > MaxDiffLimit {
		return errcode.New(errcode.InvalidRequest, "limit %d outside 0..%d", r.Limit, MaxDiffLimit)
	}
	return nil
}

// DiffResult answers diff: the two snapshots compared (From nil: an
// empty workspace), the counts of paths created, modified and removed,
// and the changes sorted by path, at most the request's limit of them
// (Truncated when there were more).
type DiffResult struct {
	From      *Snapshot   `json:"from,omitempty"`
	To        *Snapshot   `json:"to"`
	Created   int         `json:"created"`
	Modified  int         `json:"modified"`
	Removed   int         `json:"removed"`
	Changes   []DiffEntry `json:"changes"`
	Truncated bool        `json:"truncated"`
}

// DiffEntry is one path that changed. Kind is the entry's type in the
// later snapshot ("file", "dir", "symlink"; for a removed path, in the
// earlier); Change is "created", "modified" or "removed".
type DiffEntry struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"`
	Change string `json:"change"`
}
