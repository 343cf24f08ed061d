package docker_test

import (
	"bytes"
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime/docker"
)

func TestPidHeader(t *testing.T) {
	for _, tc := range []struct {
		chunks []string
		pid    int
		out    string
	}{
		{[]string{"42\nhello"}, 42, "hello"},
		{[]string{"4", "2", "\n", "hel", "lo"}, 42, "hello"},
		{[]string{"42\n"}, 42, ""},
		{[]string{"42\r\nhello"}, 42, "hello"}, // a terminal's line end
		{[]string{"42\r", "\nhello"}, 42, "hello"},
		{[]string{"4\r2\nhello"}, 0, "4\r2\nhello"},
		{[]string{"42"}, 0, "42"},                 // the stream ended in the header
		{[]string{"x42\nhello"}, 0, "x42\nhello"}, // not a pid line: the engine's message
		{[]string{"OCI runtime exec failed: exec failed: unable to start container process"}, 0, "OCI runtime exec failed: exec failed: unable to start container process"},
		{[]string{"0\nz"}, 0, "0\nz"},
		{[]string{"12345678901\nz"}, 0, "12345678901\nz"},
		{[]string{""}, 0, ""},
	} {
		var chunks [][]byte
		for _, c := range tc.chunks {
			chunks = append(chunks, []byte(c))
		}
		pid, out := docker.SplitPidHeader(chunks)
		if pid != tc.pid || string(out) != tc.out {
			t.Errorf("%q: got pid %d, output %q; want %d, %q", tc.chunks, pid, out, tc.pid, tc.out)
		}
	}
}

// FuzzPidHeader: however the stream is cut, a pid line is taken off and
// everything after it passes unchanged.
func FuzzPidHeader(f *testing.F) {
	f.Add([]byte("hello\nworld"), uint8(3), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint8) {
		in := append([]byte("1234\n"), data...)
		a := min(int(cut1), len(in))
		b := min(a+int(cut2), len(in))
		pid, out := docker.SplitPidHeader([][]byte{in[:a], in[a:b], in[b:]})
		if pid != 1234 || !bytes.Equal(out, data) {
			t.Fatalf("cut at %d, %d: got pid %d, output %q; want 1234, %q", a, b, pid, out, data)
		}
	})
}
