package testenv

import (
	"slices"
	"testing"
	"time"
)

func TestP50Millis(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		in   []time.Duration
		want float64
	}{
		{nil, 0},
		{[]time.Duration{7 * ms}, 7},
		{[]time.Duration{3 * ms, 1 * ms, 2 * ms}, 2},
		{[]time.Duration{4 * ms, 1 * ms, 3 * ms, 2 * ms}, 2}, // the lower middle one
		{[]time.Duration{1500 * time.Microsecond, 2 * ms}, 1.5},
	} {
		in := slices.Clone(tc.in)
		if got := P50Millis(in); got != tc.want {
			t.Errorf("P50Millis(%v) = %v; want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("P50Millis reordered its argument: %v; want %v", in, tc.in)
		}
	}
}
