package runtime_test

import (
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime"
)

func TestCappedBuffer(t *testing.T) {
	for _, tc := range []struct {
		max       int
		writes    []string
		kept      string
		total     int64
		truncated bool
	}{
		{0, []string{"abc"}, "", 3, true},
		{0, nil, "", 0, false},
		{3, []string{"abc"}, "abc", 3, false},
		{5, []string{"abc", "def"}, "abcde", 6, true},
		{5, []string{"abcdef", "gh"}, "abcde", 8, true},
		{10, []string{"abc", "", "d"}, "abcd", 4, false},
	} {
		b := &runtime.CappedBuffer{Max: tc.max}
		for _, w := range tc.writes {
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Errorf("Max %d: Write(%q) = %d, %v, want %d, nil", tc.max, w, n, err, len(w))
			}
		}
		if got := string(b.Bytes()); got != tc.kept {
			t.Errorf("Max %d, writes %q: kept %q, want %q", tc.max, tc.writes, got, tc.kept)
		}
		if got := b.Total(); got != tc.total {
			t.Errorf("Max %d, writes %q: total %d, want %d", tc.max, tc.writes, got, tc.total)
		}
		if got := b.Truncated(); got != tc.truncated {
			t.Errorf("Max %d, writes %q: truncated %v, want %v", tc.max, tc.writes, got, tc.truncated)
		}
	}
}
