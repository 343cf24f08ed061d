package auth

import (
	"slices"
	"testing"

	"github.com/paddock-dev/paddock/events"
)

// TestEventStreamsMatch: the permissions name the stream of every
// partition a deployment may have, as the events package names them.
func TestEventStreamsMatch(t *testing.T) {
	if maxPartitions != events.MaxPartitions || eventsStream != events.DefaultStream {
		t.Fatalf("auth: %d partitions of %s; events: %d of %s", maxPartitions, eventsStream, events.MaxPartitions, events.DefaultStream)
	}
	var want []string
	for k := range events.MaxPartitions {
		want = append(want, events.PartitionStream("", k))
	}
	if got := eventStreams(); !slices.Equal(got, want) {
		t.Fatalf("auth's event streams %v, want %v", got, want)
	}
}
