package listenaddr_test

import (
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/listenaddr"
)

// TestCheck: loopback addresses pass; others only when allowed; bad ones
// are invalid_request naming the flag.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:9464", false, true},
		{"localhost:0", false, true},
		{"[::1]:9464", false, true},
		{"0.0.0.0:9464", false, false},
		{":9464", false, false},
		{"10.1.2.3:9464", false, false},
		{"0.0.0.0:9464", true, true},
		{":9464", true, true},
		{"127.0.0.1", false, false},
		{"127.0.0.1:http", false, false},
		{"127.0.0.1:70000", false, false},
		{"127.0.0.1:-1", false, false},
		{"example.com:9464", true, false},
		{"", false, false},
		{"", true, false},
	} {
		err := listenaddr.Check("--x-addr", c.addr, c.remote, "pass --x-allow-remote")
		if c.ok && err != nil {
			t.Errorf("Check(%q, %v) = %v, want nil", c.addr, c.remote, err)
		}
		if !c.ok && (errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), "--x-addr")) {
			t.Errorf("Check(%q, %v) = %v, want invalid_request naming the flag", c.addr, c.remote, err)
		}
	}
	if err := listenaddr.Check("--x-addr", "10.0.0.1:1", false, "pass --x-allow-remote"); !strings.HasSuffix(err.Error(), "not a loopback address: pass --x-allow-remote") {
		t.Errorf("refusal %q does not end with the caller's reason", err)
	}
}
