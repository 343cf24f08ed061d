package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/paddock-dev/paddock/errcode"
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

// privateNets are the address ranges of private networks (RFC 1918,
// carrier-grade NAT, IPv6 unique local), where a cluster's servers
// usually are: the cluster's ports are refused there.
var privateNets = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fc00::/7"),
}

// GuardConfig is what a guard refuses beyond alwaysRefused and the node's
// own addresses.
type GuardConfig struct {
	// Refuse are prefixes refused on every port (the networks of other
	// sandboxes).
	Refuse []netip.Prefix
	// Ports are the NATS cluster's own ports (client, route, monitoring,
	// leafnode), refused at every private address, every address of the
	// node and every address in Servers, whatever the port's owner there.
	Ports []int
	// Servers are addresses of the cluster's servers, public ones
	// included: Ports are refused there too.
	Servers []netip.Addr
	// HostAddrs returns the node's own addresses (default: the addresses
	// of its interfaces). The guard asks for each connection, so an
	// address the node gains later (a Docker network made since) is
	// refused too.
	HostAddrs func() ([]netip.Addr, error)
}

// Guard refuses the destinations no policy may reach: alwaysRefused, the
// node's own addresses (read afresh for each connection: NATS, the
// Docker daemon, the gateways of Docker's networks, anything the node
// serves), the extra prefixes the node names (the networks of other
// sandboxes), and the cluster's own ports at private addresses and the
// cluster's servers.
type Guard struct {
	refused   []netip.Prefix
	ports     []int // sorted
	servers   []netip.Addr
	hostAddrs func() ([]netip.Addr, error)
}

// NewGuard returns a guard of cfg. It fails when the node's addresses
// cannot be read.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	g := &Guard{refused: append([]netip.Prefix{}, alwaysRefused...), hostAddrs: cfg.HostAddrs}
	if g.hostAddrs == nil {
		g.hostAddrs = InterfaceAddrs
	}
	if _, err := g.hostAddrs(); err != nil {
		return nil, fmt.Errorf("egress: the node's addresses: %w", err)
	}
	for _, p := range cfg.Refuse {
		g.refused = append(g.refused, p.Masked())
	}
	for _, p := range cfg.Ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("egress: refused port %d: want 1 to 65535", p)
		}
		g.ports = append(g.ports, p)
	}
	slices.Sort(g.ports)
	g.ports = slices.Compact(g.ports)
	for _, a := range cfg.Servers {
		g.servers = append(g.servers, a.Unmap())
	}
	return g, nil
}

// InterfaceAddrs returns the addresses of this host's interfaces.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// Refused reports why ip:port may not be reached, or "" when it may.
func (g *Guard) Refused(ip netip.Addr, port int) string {
	v := g.view()
	return v.refused(ip, port)
}

// view is one connection's look at the guard: the node's addresses are
// read once, when first needed.
type view struct {
	g    *Guard
	read bool
	host []netip.Addr
	err  error
}

func (g *Guard) view() *view { return &view{g: g} }

// refused is Guard.Refused with the node's addresses read at most once.
func (v *view) refused(ip netip.Addr, port int) string {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return "no address"
	}
	for _, p := range v.g.refused {
		if p.Contains(ip) {
			return fmt.Sprintf("%s is in %s, which no policy reaches (this node, cloud metadata, other sandboxes)", ip, p)
		}
	}
	if !v.read {
		v.host, v.err = v.g.hostAddrs()
		v.read = true
	}
	if v.err != nil {
		return fmt.Sprintf("the node's own addresses cannot be read (%v), so none is reached", v.err)
	}
	if slices.Contains(v.host, ip) {
		return fmt.Sprintf("%s is an address of this node, which no policy reaches", ip)
	}
	if _, ok := slices.BinarySearch(v.g.ports, port); ok {
		if slices.Contains(v.g.servers, ip) {
			return fmt.Sprintf("%s is a server of this node's NATS cluster, and port %d one of the cluster's", ip, port)
		}
		for _, p := range privateNets {
			if p.Contains(ip) {
				return fmt.Sprintf("port %d is one of the NATS cluster's own (client, route, monitoring, leafnode), which no policy reaches at a private address (%s is in %s)", port, ip, p)
			}
		}
	}
	return ""
}

// ParsePorts parses a comma-separated list of ports ("" is none); a bad
// one is invalid_request.
func ParsePorts(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := parsePort(f)
		if err != nil {
			return nil, errcode.New(errcode.InvalidRequest, "ports %q: %v", truncate(list), err)
		}
		out = append(out, p)
	}
	return out, nil
}
