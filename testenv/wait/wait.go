// Package wait holds the one poll-until-a-deadline helper of Paddock's
// tests. It imports nothing of Paddock's, so that a package testenv
// cannot serve (testenv imports the node, which imports it) waits as
// every other test does; testenv.Eventually is this.
package wait

import (
	"testing"
	"time"
)

// Eventually calls cond until it returns nil, failing t with cond's last
// error once timeout has passed.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}
