package metrics_test

import (
	"testing"
	"time"

	"github.com/paddock-dev/paddock/metrics"
)

// BenchmarkOpRecord measures what the node's hooks record per operation:
// one Op (a counter and a histogram) and two Appends (start and finish).
//
//	go test -run '^$' -bench BenchmarkOpRecord -count 3 ./metrics/
func BenchmarkOpRecord(b *testing.B) {
	m := metrics.New()
	b.ReportAllocs()
	for b.Loop() {
		m.Append(200*time.Microsecond, nil)
		m.Op("exec", "local", metrics.OutcomeOK, "", 2*time.Millisecond)
		m.Append(200*time.Microsecond, nil)
	}
}
