// Package allowlist holds the modes of a sandbox's egress and the parsed
// entries of its allow list: parsing and checking only, no network I/O.
//
// It is apart from package egress (the proxy that enforces a policy) so
// that what only validates a policy -- the command schema (commands), and
// through it the in-sandbox supervisor -- does not link net/http and
// crypto/tls with the proxy. Package egress names these types and
// functions under their old names.
package allowlist

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/paddock-dev/paddock/errcode"
)

// Modes of a sandbox's egress.
const (
	// ModeNone: no network at all (the default).
	ModeNone = "none"
	// ModeAllow: only the destinations of the allow list, through the
	// node's proxy.
	ModeAllow = "allow"
	// ModeOpen: the runtime's network, unfiltered (where the operator's
	// policy permits it).
	ModeOpen = "open"
)

// Bounds of an allow list.
const (
	// MaxRules is the most entries an allow list may hold.
	MaxRules = 256
	// maxRuleLen bounds one entry (a DNS name is at most 253 bytes).
	maxRuleLen = 300
)

// Rule is one parsed entry of an allow list: a host name, a wildcard of a
// domain's subdomains, or an IP prefix (a single address is a /32 or
// /128), each with a port or any port (0).
type Rule struct {
	// Name is a lower-case host name without a trailing dot; with
	// Wildcard it is the domain whose subdomains match (not itself).
	Name     string
	Wildcard bool
	// Prefix is set for an IP or CIDR entry.
	Prefix netip.Prefix
	// Port is the one port the rule opens; 0 opens every port.
	Port int
	// Text is the entry as given.
	Text string
}

// Parse parses an allow list. Entries: "host", "host:port",
// "*.example.com[:port]", "192.0.2.1[:port]", "192.0.2.0/24[:port]",
// "2001:db8::1", "[2001:db8::1]:443", "2001:db8::/32", "[2001:db8::/32]:443".
// A bad entry is invalid_request, naming it.
func Parse(entries []string) ([]Rule, error) {
	if len(entries) > MaxRules {
		return nil, errcode.New(errcode.InvalidRequest, "egress allow list: %d entries; at most %d", len(entries), MaxRules)
	}
	rules := make([]Rule, 0, len(entries))
	for _, e := range entries {
		r, err := parseRule(e)
		if err != nil {
			return nil, errcode.New(errcode.InvalidRequest, "egress allow entry %q: %v", truncate(e), err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func parseRule(e string) (Rule, error) {
	r := Rule{Text: e}
	if e == "" || len(e) > maxRuleLen {
		return r, fmt.Errorf("empty or longer than %d bytes", maxRuleLen)
	}
	host, port, err := splitPort(e)
	if err != nil {
		return r, err
	}
	r.Port = port
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return r, fmt.Errorf("not a CIDR: %v", err)
		}
		r.Prefix = p.Masked()
		return r, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return r, fmt.Errorf("an address with a zone")
		}
		r.Prefix = netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
		return r, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard, host = true, rest
	}
	name, err := CanonicalName(host)
	if err != nil {
		return r, err
	}
	if r.Wildcard && !strings.Contains(name, ".") {
		return r, fmt.Errorf("a wildcard must name a domain below a top-level one (*.example.com)")
	}
	r.Name = name
	return r, nil
}

// splitPort splits "host:port", "[v6]:port", or a host without a port
// (a bare IPv6 address or CIDR has colons and no brackets).
func splitPort(e string) (string, int, error) {
	if strings.HasPrefix(e, "[") {
		end := strings.Index(e, "]")
		if end < 0 {
			return "", 0, fmt.Errorf("unclosed [")
		}
		host, rest := e[1:end], e[end+1:]
		if rest == "" {
			return host, 0, nil
		}
		p, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", 0, fmt.Errorf("text after ]")
		}
		port, err := ParsePort(p)
		return host, port, err
	}
	if strings.Count(e, ":") > 1 {
		return e, 0, nil // IPv6 without a port
	}
	host, p, found := strings.Cut(e, ":")
	if !found {
		return host, 0, nil
	}
	port, err := ParsePort(p)
	return host, port, err
}

// ParsePort parses a port number, 1 to 65535; anything else is an error
// naming it.
func ParsePort(p string) (int, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q: want 1 to 65535", p)
	}
	return n, nil
}

// CanonicalName returns a host name lower-cased and without its trailing
// dot, or an error when it is not a DNS name (labels of letters, digits,
// hyphens and underscores, 1 to 63 bytes, at most 253 in all).
func CanonicalName(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" || len(h) > 253 {
		return "", fmt.Errorf("not a host name")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("not a host name: label %q", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("not a host name: %q", c)
			}
		}
	}
	return h, nil
}
