package egress

import (
	"fmt"
	"net"
	"net/netip"
)

// alwaysRefused are destinations no allow rule opens: this host
// (loopback, unspecified), link-local ranges (where clouds put their
// metadata services: 169.254.169.254, fd00:ec2::254 on AWS over IPv6,
// 100.100.100.200 on Alibaba), multicast and broadcast.
var alwaysRefused = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("255.255.255.255/32"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
}

// Guard refuses the destinations no policy may reach: alwaysRefused, the
// node's own addresses (read from its interfaces when the guard is made:
// NATS, the Docker daemon, anything the node serves), and the extra
// prefixes the node names (the networks of other sandboxes).
type Guard struct {
	refused []netip.Prefix
}

// NewGuard returns a guard of alwaysRefused, this host's interface
// addresses, and extra.
func NewGuard(extra ...netip.Prefix) (*Guard, error) {
	g := &Guard{refused: append([]netip.Prefix{}, alwaysRefused...)}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("egress: the node's addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				ip = ip.Unmap()
				g.refused = append(g.refused, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	for _, p := range extra {
		g.refused = append(g.refused, p.Masked())
	}
	return g, nil
}

// Refused reports why ip may not be reached, or "" when it may.
func (g *Guard) Refused(ip netip.Addr) string {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return "no address"
	}
	for _, p := range g.refused {
		if p.Contains(ip) {
			return fmt.Sprintf("%s is in %s, which no policy reaches (this node, cloud metadata, other sandboxes)", ip, p)
		}
	}
	return ""
}
