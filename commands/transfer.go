package commands

import "github.com/paddock-dev/paddock/errcode"

// Transfers move files between a client and the workspace bucket through
// the engine, on the tenant's own command subjects: a client needs no
// access to the bucket (a tenant's NATS account has none). An upload is
// opened on Subjects.Upload, its chunks go in order to the subject the
// engine answers with (Subjects.Transfer), and the last chunk's answer
// names the object: uploads/<tenant>/<id>, for WriteArgs.Upload or
// HydrateArgs.Upload. A download is opened on Subjects.Download with the
// name a ReadResult gave, and read in order, chunk by chunk, from its
// subject; the engine deletes the object after the last chunk. An open
// transfer that hears nothing for TransferIdle is aborted.

// TransferChunkBytes is the most data one chunk carries.
const TransferChunkBytes = 256 << 10

// UploadArgs opens an upload, or with Discard deletes an upload the
// client no longer needs (one a failed write or hydrate left).
type UploadArgs struct {
	Discard string `json:"discard,omitempty"`
}

// Validate bounds the name.
func (a *UploadArgs) Validate() error {
	if len(a.Discard) > 512 {
		return errcode.New(errcode.InvalidRequest, "discard names more than 512 bytes")
	}
	return nil
}

// TransferOpened answers UploadArgs and DownloadArgs: where to send the
// chunks, and how large each may be.
type TransferOpened struct {
	Subject    string `json:"subject"`
	ChunkBytes int    `json:"chunk_bytes"`
}

// UploadChunk is one chunk of an upload, at Offset (the bytes received so
// far). A chunk at an offset below that is a retry and is acknowledged
// without being written again.
type UploadChunk struct {
	Offset int64  `json:"offset"`
	Data   []byte `json:"data,omitempty"`
	// Last ends the upload: the engine stores the object and answers its name.
	Last bool `json:"last,omitempty"`
}

// Validate bounds the chunk.
func (a *UploadChunk) Validate() error {
	if a.Offset < 0 || a.Offset > MaxFileBytes {
		return errcode.New(errcode.InvalidRequest, "offset %d outside 0..%d", a.Offset, int64(MaxFileBytes))
	}
	if len(a.Data) > TransferChunkBytes {
		return errcode.New(errcode.InvalidRequest, "a chunk of %d bytes is over %d", len(a.Data), TransferChunkBytes)
	}
	return nil
}

// UploadProgress answers an UploadChunk: the bytes received, and on the
// last chunk the object's name.
type UploadProgress struct {
	Received int64  `json:"received"`
	Upload   string `json:"upload,omitempty"`
}

// DownloadArgs opens a download of Name (a ReadResult.Download).
type DownloadArgs struct {
	Name string `json:"name"`
}

// Validate bounds the name.
func (a *DownloadArgs) Validate() error {
	if a.Name == "" || len(a.Name) > 512 {
		return errcode.New(errcode.InvalidRequest, "name must be 1..512 bytes")
	}
	return nil
}

// DownloadChunk asks for the chunk at Offset (the bytes read so far).
type DownloadChunk struct {
	Offset int64 `json:"offset"`
}

// Validate bounds the offset.
func (a *DownloadChunk) Validate() error {
	if a.Offset < 0 || a.Offset > MaxFileBytes {
		return errcode.New(errcode.InvalidRequest, "offset %d outside 0..%d", a.Offset, int64(MaxFileBytes))
	}
	return nil
}

// DownloadData answers a DownloadChunk; Last is true on the final chunk,
// after which the object is gone.
type DownloadData struct {
	Data []byte `json:"data,omitempty"`
	Last bool   `json:"last,omitempty"`
}
