package egress

import (
	"net/netip"
	"testing"
)

// BenchmarkGuardRefused is the guard's part of one connection through
// the proxy: a public address checked against every refused range, with
// this host's interface addresses read afresh (docs/benchmarks.md).
func BenchmarkGuardRefused(b *testing.B) {
	g, err := NewGuard(GuardConfig{Ports: []int{4222, 6222, 7422, 8222}})
	if err != nil {
		b.Fatal(err)
	}
	ip := netip.MustParseAddr("192.0.2.7")
	for b.Loop() {
		if why := g.Refused(ip, 443); why != "" {
			b.Fatal(why)
		}
	}
}
