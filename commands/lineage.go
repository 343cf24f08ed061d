package commands

// Parent is where a forked session came from: a snapshot that its
// parent's chain recorded. A child's create start event carries it, and
// audit verify checks it against the parent's events.
type Parent struct {
	SessionID string `json:"session_id"`
	// Seq is the parent's event seq of the operation that recorded the
	// snapshot (its Snapshot.Seq: the start of a persist, stop or fork).
	Seq      uint64 `json:"seq"`
	Snapshot string `json:"snapshot"`
	// RootSHA256 is the snapshot's manifest root digest.
	RootSHA256 string `json:"root_sha256"`
	// Memory is set when the snapshot is a memory checkpoint (issue 27):
	// a child is restored from it with its processes running, and its
	// files must match these digests.
	Memory *MemoryImage `json:"memory,omitempty"`
}
