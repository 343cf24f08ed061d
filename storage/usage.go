package storage

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// WarnPercent is the share of its limit at or past which a stream is
// nearly full: `engine status` marks it and the Monitor logs a warning.
const WarnPercent = 80

// Usage is a stream's stored bytes against its limit.
type Usage struct {
	Stream string
	Bytes  uint64
	// MaxBytes is the stream's limit; 0 when it has none.
	MaxBytes int64
	// DropsOldest reports a stream that drops its oldest messages at its
	// limit (discard old) rather than refusing new ones.
	DropsOldest bool
}

// UsageOf returns a stream's usage from its info.
func UsageOf(info *jetstream.StreamInfo) Usage {
	u := Usage{Stream: info.Config.Name, Bytes: info.State.Bytes, DropsOldest: info.Config.Discard == jetstream.DiscardOld}
	if info.Config.MaxBytes > 0 {
		u.MaxBytes = info.Config.MaxBytes
	}
	return u
}

// Read returns a stream's usage. It fails with the lookup's error
// (jetstream.ErrStreamNotFound for a missing stream).
func Read(ctx context.Context, js jetstream.JetStream, stream string) (Usage, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return Usage{Stream: stream}, fmt.Errorf("stream %s: %w", stream, err)
	}
	return UsageOf(s.CachedInfo()), nil
}

// Percent is the share of the limit in use (0 without a limit).
func (u Usage) Percent() float64 {
	if u.MaxBytes <= 0 {
		return 0
	}
	return 100 * float64(u.Bytes) / float64(u.MaxBytes)
}

// Warn reports whether the stream is at or past WarnPercent of its limit.
func (u Usage) Warn() bool { return u.MaxBytes > 0 && u.Percent() >= WarnPercent }
