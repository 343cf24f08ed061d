// Package egress holds a sandbox's outbound network policy and the proxy
// that enforces it from outside the sandbox (the policy's modes and the
// parsing of its allow list are in egress/allowlist, which the wire
// contract imports without a network stack).
//
// A sandbox with the allow policy has no network interface but its
// loopback; the node listens on that loopback (in the sandbox's network
// namespace) and the sandbox's programs reach the world only through that
// listener, an HTTP proxy (CONNECT for any TCP, absolute-form requests for
// plain HTTP). The proxy decides each connection against the policy's
// rules and a set of destinations no rule can open (the node's own
// addresses, cloud metadata, other sandboxes), resolves only names a rule
// allows, and reports every decision to its caller, which records it.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/paddock-dev/paddock/egress/allowlist"
)

// Modes of a sandbox's egress (see package allowlist).
const (
	// ModeNone: no network at all (the default).
	ModeNone = allowlist.ModeNone
	// ModeAllow: only the destinations of the allow list, through the
	// node's proxy.
	ModeAllow = allowlist.ModeAllow
	// ModeOpen: the runtime's network, unfiltered (where the operator's
	// policy permits it).
	ModeOpen = allowlist.ModeOpen
)

// MaxRules is the most entries an allow list may hold.
const MaxRules = allowlist.MaxRules

// Rule is one parsed entry of an allow list (allowlist.Rule).
type Rule = allowlist.Rule

// Parse parses an allow list (allowlist.Parse); a bad entry is
// invalid_request, naming it.
func Parse(entries []string) ([]Rule, error) { return allowlist.Parse(entries) }

// CanonicalName returns a host name lower-cased and without its trailing
// dot, or an error when it is not a DNS name (allowlist.CanonicalName).
func CanonicalName(h string) (string, error) { return allowlist.CanonicalName(h) }

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// matchName returns the first rule that allows name (canonical) on port:
// a name rule equal to it, or a wildcard of a domain it is below. IP rules
// never match a name (a name is not resolved to be matched against them).
func matchName(rules []Rule, name string, port int) (Rule, bool) {
	for _, r := range rules {
		if r.Name == "" || (r.Port != 0 && r.Port != port) {
			continue
		}
		if !r.Wildcard && name == r.Name || r.Wildcard && strings.HasSuffix(name, "."+r.Name) {
			return r, true
		}
	}
	return Rule{}, false
}

// matchAddr returns the first IP rule that holds ip on port.
func matchAddr(rules []Rule, ip netip.Addr, port int) (Rule, bool) {
	ip = ip.Unmap()
	for _, r := range rules {
		if !r.Prefix.IsValid() || (r.Port != 0 && r.Port != port) {
			continue
		}
		if r.Prefix.Contains(ip) {
			return r, true
		}
	}
	return Rule{}, false
}

// SplitHostPort splits a proxy request's target, "host:port" or
// "[v6]:port", into a canonical name or an address, and a port.
func SplitHostPort(target string) (name string, ip netip.Addr, port int, err error) {
	h, p, err := net.SplitHostPort(target)
	if err != nil {
		return "", netip.Addr{}, 0, err
	}
	if port, err = parsePort(p); err != nil {
		return "", netip.Addr{}, 0, err
	}
	if a, aerr := netip.ParseAddr(h); aerr == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, 0, fmt.Errorf("an address with a zone")
		}
		return "", a.Unmap(), port, nil
	}
	name, err = CanonicalName(h)
	return name, netip.Addr{}, port, err
}

// parsePort parses a port number, 1 to 65535 (allowlist.ParsePort).
func parsePort(p string) (int, error) { return allowlist.ParsePort(p) }
