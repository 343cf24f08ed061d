package events

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddock-dev/paddock/errcode"
)

// StreamInfo returns the events stream's (of a log of one partition,
// that partition's; else the first) current state (first and last
// sequences, message count) and config. It fails with unavailable when the
// stream cannot be reached.
func (l *Log) StreamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	stream := l.readStream()
	if stream == "" {
		stream = l.stream
	}
	s, err := l.js.Stream(ctx, stream)
	if err != nil {
		return nil, errcode.Wrap(errcode.Unavailable, err, "events stream "+stream)
	}
	return s.CachedInfo(), nil
}
