package events

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/errcode"
)

// StreamInfo returns the events stream's current state (first and last
// sequences, message count) and config. It fails with unavailable when the
// stream cannot be reached.
func (l *Log) StreamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	s, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "events stream "+l.stream)
	}
	return s.CachedInfo(), nil
}
