// Package bytesize reads the byte sizes the commands' flags take (512m,
// 2g, 64MiB), for engine and agent-node alike.
package bytesize

import (
	"strconv"
	"strings"

	"github.com/paddock-dev/paddock/errcode"
)

// Parse reads a byte size: a plain number of bytes, or a number with a
// suffix k, m, g, t (powers of 1024; "b", "i" and "ib" are accepted, so
// 512m, 512M, 512MiB and 512mb are the same). Anything else, a negative
// size or one past 2^62, is invalid_request.
func Parse(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "b")
	t = strings.TrimSuffix(t, "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	// Written so that NaN, which compares false with everything, fails too.
	if err != nil || !(f >= 0 && f*float64(mult) <= float64(1<<62)) {
		return 0, errcode.New(errcode.InvalidRequest, "size %q is not a byte size like 512m or 2g", s)
	}
	return int64(f * float64(mult)), nil
}
