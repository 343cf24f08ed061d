package scheduler

import (
	"testing"

	"github.com/paddock-dev/paddock/projector"
)

// TestCaughtUp: a lost node's sessions are read only once every
// partition's stream is caught up by one of its own projectors; another
// partition's projector being far ahead does not count.
func TestCaughtUp(t *testing.T) {
	st := func(stream string, seq uint64) projector.Status {
		s := projector.Status{Stream: stream}
		s.StreamSeq = seq
		return s
	}
	want := map[string]uint64{"SBX_EVENTS": 10, "SBX_EVENTS_1": 5}
	for _, c := range []struct {
		name string
		sts  []projector.Status
		ok   bool
	}{
		{"both partitions reached", []projector.Status{st("SBX_EVENTS", 10), st("SBX_EVENTS_1", 7)}, true},
		{"partition 1 behind", []projector.Status{st("SBX_EVENTS", 100), st("SBX_EVENTS_1", 4)}, false},
		{"another engine's projector reached it", []projector.Status{st("SBX_EVENTS", 10), st("SBX_EVENTS_1", 4), st("SBX_EVENTS_1", 5)}, true},
		{"a partition with no projector", []projector.Status{st("SBX_EVENTS", 10)}, false},
	} {
		if got := caughtUp(c.sts, want); got != c.ok {
			t.Errorf("%s: caughtUp = %v, want %v", c.name, got, c.ok)
		}
	}
}
