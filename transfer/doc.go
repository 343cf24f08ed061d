// Package transfer is the engine's file transfer service: it moves files
// between clients and the workspace bucket on the tenant's own command
// subjects (commands/transfer.go has the protocol), so that a client
// whose NATS account has no JetStream (every tenant's, with auth on) can
// hydrate from an archive, write a large file and read one. The tenant of
// a transfer is the subject's, which the account import confines, and the
// object names are checked against it (objectstore.CheckUpload).
//
// Each open transfer is a subscription of its own on one engine, with a
// goroutine that streams between the chunks and the bucket; it ends with
// its last chunk, an error, TransferIdle without a chunk, or Close.
package transfer
