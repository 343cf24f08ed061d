package objectstore

import (
	"context"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Internals the tests of package objectstore_test look at.

// PutObject is putObject without metadata: it returns how many chunks
// were sent again, and how many of unknown outcome were settled.
func (s *Store) PutObject(ctx context.Context, name string, r io.Reader) (retries, settled int, err error) {
	res, err := s.putObject(ctx, jetstream.ObjectMeta{Name: name}, r, nil)
	return res.retries, res.settled, err
}

// Raw is the bucket as nats.go sees it.
func (s *Store) Raw() jetstream.ObjectStore { return s.obs }

// JS is the store's JetStream.
func (s *Store) JS() jetstream.JetStream { return s.js }

// Bucket is the bucket's name.
func (s *Store) Bucket() string { return s.bucket }

// WithRenewAge returns a store on the same bucket whose uploads renew a
// chunk they skip once it is older than d (ChunkRenewAge in production).
func (s *Store) WithRenewAge(d time.Duration) *Store { c := *s; c.renewAge = d; return &c }

var (
	ChunkSubject    = chunkSubject
	TooManyRequests = tooManyRequests
	Backoff         = backoff
)

const MaxBackoff = maxBackoff
