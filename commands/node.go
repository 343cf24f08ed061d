package commands

// Node admin ops travel on a node's own subject (<prefix>.node.<node>.<op>)
// and only the engine's and admins' credentials may send them: they are
// how an operator takes a node out of placement and moves its sessions
// (engine node cordon, uncordon, drain).
const (
	// NodeCordon stops placements on the node (it says cordoned in its
	// heartbeats) until uncordon or its restart; its sessions go on.
	NodeCordon = "cordon"
	// NodeUncordon makes the node placeable again.
	NodeUncordon = "uncordon"
	// NodeRelease makes the node stop serving a session that is shut
	// down, so that its next resume is placed by the scheduler, on
	// another node when this one is cordoned.
	NodeRelease = "release"
)

// ReleaseArgs name the session a node releases.
type ReleaseArgs struct {
	Tenant    string `json:"tenant"`
	SessionID string `json:"session_id"`
}

// Validate checks the arguments.
func (a *ReleaseArgs) Validate() error {
	if err := CheckToken("tenant", a.Tenant); err != nil {
		return err
	}
	return CheckToken("session_id", a.SessionID)
}
