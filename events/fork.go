package events

import "github.com/paddock-dev/paddock/commands"

// ForkStart is the start data of a fork recorded in the parent's chain:
// the children the scheduler drew and the point asked for (a snapshot id,
// a seq, or neither: the node persists first).
type ForkStart struct {
	Children   []string `json:"children"`
	SnapshotID string   `json:"snapshot_id,omitempty"`
	AtSeq      uint64   `json:"at_seq,omitempty"`
}

// ForkFinish is the finish data of a fork: the point the children come
// from and the children. Snapshot is set when the fork persisted first
// (its Seq is the fork's start seq), so that the chain records that
// snapshot as a persist's finish would.
type ForkFinish struct {
	Parent   commands.Parent    `json:"parent"`
	Children []string           `json:"children"`
	Snapshot *commands.Snapshot `json:"snapshot,omitempty"`
}
