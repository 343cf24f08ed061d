package snapshot

import (
	"github.com/paddock-dev/paddock/errcode"
)

// Format is the commands.Snapshot format of a manifest snapshot.
const Format = "manifest"

// Version is the manifest encoding's version.
const Version = 1

// ChunkSize is the size of every chunk of a file but its last.
const ChunkSize = 1 << 20

// Kind is the type of a manifest entry.
type Kind string

// The kinds of entry a manifest holds. Anything else a workspace holds
// (sockets, FIFOs, devices) is left out, as the tar export leaves it out.
const (
	KindFile    Kind = "file"
	KindDir     Kind = "dir"
	KindSymlink Kind = "symlink"
)

// Entry is one path of a workspace.
type Entry struct {
	// Path is workspace-relative, slash-separated and clean ("a/b", never
	// "", ".", "/a", "a/../b").
	Path string `json:"path"`
	Kind Kind   `json:"kind"`
	// Mode is the permission bits (and setuid, setgid, sticky: 07777).
	Mode uint32 `json:"mode"`
	// Size is a file's length in bytes.
	Size int64 `json:"size,omitempty"`
	// Target is a symlink's target, as read (never followed).
	Target string `json:"target,omitempty"`
	// Chunks are the hex sha256 digests of a file's content in ChunkSize
	// pieces: ceil(Size/ChunkSize) of them (none for an empty file).
	Chunks []string `json:"chunks,omitempty"`
}

// Manifest is a workspace's state: its entries sorted by Path, each path
// once, every parent directory of an entry listed before it.
type Manifest struct {
	Version int     `json:"version"`
	Entries []Entry `json:"entries"`
}

// Limits bound a manifest a node decodes.
type Limits struct {
	// MaxEntries bounds the entries (0: 1,000,000).
	MaxEntries int
	// MaxBytes bounds the logical bytes, the sum of file sizes (0: 1 TiB).
	MaxBytes int64
}

// errInvalid is the error of a manifest that does not hold.
func errInvalid(format string, args ...any) error {
	return errcode.New(errcode.InvalidRequest, "manifest: "+format, args...)
}
