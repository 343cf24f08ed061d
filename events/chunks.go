package events

// ChunkCounts is what a content-addressed snapshot's persist or restore
// moved, in chunks (snapshot.ChunkSize bytes of file content each, the
// last of a file shorter), so that an operator can see that a persist
// read and uploaded only what changed and a restore fetched only what the
// node's cache lacked.
type ChunkCounts struct {
	// Chunks are the snapshot's distinct chunks.
	Chunks int `json:"chunks"`
	// HashedFiles and HashedBytes are what a persist had to read and hash
	// (the rest its hash cache knew unchanged).
	HashedFiles int   `json:"hashed_files,omitempty"`
	HashedBytes int64 `json:"hashed_bytes,omitempty"`
	// Uploaded and UploadedBytes are the chunks a persist stored; Skipped
	// the ones the store held already.
	Uploaded      int   `json:"uploaded,omitempty"`
	UploadedBytes int64 `json:"uploaded_bytes,omitempty"`
	Skipped       int   `json:"skipped,omitempty"`
	// Fetched and FetchedBytes are the chunks a restore downloaded;
	// Cached the ones the node's chunk cache held.
	Fetched      int   `json:"fetched,omitempty"`
	FetchedBytes int64 `json:"fetched_bytes,omitempty"`
	Cached       int   `json:"cached,omitempty"`
	// Kept says that a restore mounted a tree this node kept from an
	// earlier restore of the snapshot, as an overlay's lower layer, and
	// wrote no file (Cached and Fetched are then 0).
	Kept bool `json:"kept,omitempty"`
}
