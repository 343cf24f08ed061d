package snapshot

import (
	"testing"
	"time"
)

// eventually polls f until it returns nil or d passes (testenv.Eventually,
// which this package's internal tests cannot import: testenv imports
// nodes, which imports snapshot).
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", d, err)
		}
		time.Sleep(10 * time.Millisecond) // a poll interval, not a synchronisation
	}
}
