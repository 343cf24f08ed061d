package bytesize

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{"512": 512, "1k": 1024, "512m": 512 << 20, "2G": 2 << 30, "1.5g": 3 << 29, "64MiB": 64 << 20, "10mb": 10 << 20} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1q", "9999999999t", "NaN", "nan", "inf", "+Inf"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
