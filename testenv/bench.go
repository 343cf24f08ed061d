package testenv

import (
	"slices"
	"time"
)

// P50Millis returns the median of a benchmark's timings in milliseconds
// (with microsecond precision), the lower middle one of an even count; l
// is not reordered. An empty l is 0.
func P50Millis(l []time.Duration) float64 {
	if len(l) == 0 {
		return 0
	}
	l = slices.Clone(l)
	slices.Sort(l)
	return float64(l[(len(l)-1)/2].Microseconds()) / 1000
}
