package egress

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/paddock-dev/paddock/errcode"
)

func TestParseAndMatch(t *testing.T) {
	rules, err := Parse([]string{
		"pypi.org:443", "*.example.com", "API.Service.test.", "192.0.2.7", "198.51.100.0/24:8080",
		"[2001:db8::1]:443", "2001:db8:1::/48",
	})
	if err != nil {
		t.Fatal(err)
	}
	names := []struct {
		name string
		port int
		want bool
	}{
		{"pypi.org", 443, true},
		{"pypi.org", 80, false},              // the entry names a port
		{"files.pypi.org", 443, false},       // not a wildcard
		{"a.example.com", 1234, true},        // no port: every port
		{"a.b.example.com", 80, true},        // any depth below
		{"example.com", 443, false},          // a wildcard is its subdomains only
		{"example.com.evil.test", 80, false}, // the near miss
		{"evilexample.com", 80, false},
		{"api.service.test", 80, true}, // case and the trailing dot
		{"192.0.2.7", 80, false},       // a name rule never holds an address, nor an address rule a name
	}
	for _, c := range names {
		if _, ok := matchName(rules, c.name, c.port); ok != c.want {
			t.Errorf("name %s:%d: allowed %v, want %v", c.name, c.port, ok, c.want)
		}
	}
	addrs := []struct {
		ip   string
		port int
		want bool
	}{
		{"192.0.2.7", 22, true},
		{"192.0.2.8", 22, false},
		{"198.51.100.200", 8080, true},
		{"198.51.100.200", 80, false},
		{"::ffff:192.0.2.7", 80, true}, // a v4-mapped address is its v4 one
		{"2001:db8::1", 443, true},
		{"2001:db8::1", 80, false},
		{"2001:db8:1:ff::9", 5, true},
		{"2001:db8:2::9", 5, false},
	}
	for _, c := range addrs {
		if _, ok := matchAddr(rules, netip.MustParseAddr(c.ip), c.port); ok != c.want {
			t.Errorf("address %s:%d: allowed %v, want %v", c.ip, c.port, ok, c.want)
		}
	}
}

func TestParseRefusesBadEntries(t *testing.T) {
	for _, e := range []string{
		"", "*.com", "*", "exa mple.com", "host:0", "host:65536", "host:http", "-bad.com",
		"10.0.0.0/33", "[2001:db8::1", "[2001:db8::1]x", "fe80::1%eth0", "a..b", string(make([]byte, 400)),
	} {
		if _, err := Parse([]string{e}); errcode.Of(err) != errcode.InvalidRequest {
			t.Errorf("Parse(%q) = %v; want invalid_request", e, err)
		}
	}
	many := make([]string, MaxRules+1)
	for i := range many {
		many[i] = "a.test"
	}
	if _, err := Parse(many); errcode.Of(err) != errcode.InvalidRequest {
		t.Errorf("Parse of %d entries = %v; want invalid_request", len(many), err)
	}
}

func TestGuardRefusesNodeAndMetadata(t *testing.T) {
	g, err := NewGuard(GuardConfig{Refuse: []netip.Prefix{netip.MustParsePrefix("172.17.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"127.0.0.1", "169.254.169.254", "::1", "fd00:ec2::254", "fe80::1", "100.100.100.200", "172.17.0.5", "::ffff:127.0.0.1", "0.0.0.0"} {
		if g.Refused(netip.MustParseAddr(ip), 80) == "" {
			t.Errorf("%s is not refused", ip)
		}
	}
	if why := g.Refused(netip.MustParseAddr("192.0.2.7"), 80); why != "" {
		t.Errorf("192.0.2.7 refused: %s", why)
	}
}

// TestGuardClusterPorts: the cluster's ports are refused at private
// addresses and at the cluster's servers, and only there; other ports
// there are not.
func TestGuardClusterPorts(t *testing.T) {
	g, err := NewGuard(GuardConfig{Ports: []int{4222, 6222}, Servers: []netip.Addr{netip.MustParseAddr("198.51.100.9")},
		HostAddrs: func() ([]netip.Addr, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ip      string
		port    int
		refused bool
	}{
		{"10.1.2.3", 6222, true},
		{"172.20.0.1", 4222, true},
		{"192.168.1.10", 6222, true},
		{"100.64.0.1", 4222, true},
		{"fd12::1", 6222, true},
		{"::ffff:10.0.0.1", 4222, true},
		{"198.51.100.9", 4222, true},   // a server of the cluster, though public
		{"198.51.100.10", 4222, false}, // a public address that is not
		{"10.1.2.3", 80, false},
		{"10.1.2.3", 6223, false},
	} {
		if got := g.Refused(netip.MustParseAddr(tc.ip), tc.port) != ""; got != tc.refused {
			t.Errorf("%s:%d refused %v, want %v", tc.ip, tc.port, got, tc.refused)
		}
	}
	if _, err := NewGuard(GuardConfig{Ports: []int{0}}); err == nil {
		t.Errorf("a guard of port 0: no error")
	}
}

// TestGuardReadsHostAddrsEachTime: an address the node gains after the
// guard was made is refused; one it cannot read its addresses for
// refuses everything.
func TestGuardReadsHostAddrsEachTime(t *testing.T) {
	var host []netip.Addr
	var hostErr error
	g, err := NewGuard(GuardConfig{HostAddrs: func() ([]netip.Addr, error) { return host, hostErr }})
	if err != nil {
		t.Fatal(err)
	}
	gw := netip.MustParseAddr("192.0.2.1")
	if why := g.Refused(gw, 80); why != "" {
		t.Fatalf("%s refused before the node had it: %s", gw, why)
	}
	host = []netip.Addr{gw}
	if g.Refused(gw, 80) == "" {
		t.Errorf("%s, an address the node gained, is not refused", gw)
	}
	host, hostErr = nil, errors.New("netlink: no")
	if g.Refused(netip.MustParseAddr("198.51.100.1"), 443) == "" {
		t.Errorf("an address was not refused while the node's addresses could not be read")
	}
}
