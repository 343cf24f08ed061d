// Package snapshot holds Paddock's content-addressed workspace snapshots:
// a Manifest lists a workspace's paths, types, modes, sizes, symlink
// targets and, for each regular file, the sha256 digests of its content
// chunks (ChunkSize bytes each, the last one shorter); its Root digest is
// the sha256 of its canonical encoding, which a persist's finish event
// records, so that the signed chain holds the workspace's state.
//
// The package is pure: it scans a directory (Scan, with a HashCache of
// digests keyed by inode, size, mtime and ctime), reads a tar stream
// (FromTar), writes a tar stream from a manifest and a chunk source
// (WriteTar), compares two manifests (Diff) and keeps a node's local
// chunk cache (Cache). Storing chunks and manifests in the NATS object
// store is objectstore's (chunks.go, manifests.go); wiring it into
// persist, restore and fork is the node's.
package snapshot
