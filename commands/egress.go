package commands

import (
	"github.com/paddock-dev/paddock/egress/allowlist"
	"github.com/paddock-dev/paddock/errcode"
)

// OpEgress is recorded by the node, never sent: one connection a sandbox
// with the allow policy asked its node's egress proxy for. Its start
// records the decision (egress.Decision), its finish the bytes carried
// (egress.Traffic), or policy_denied for a refused one.
const OpEgress Op = "egress"

// Egress (1.4) is a sandbox's outbound network policy. Mode "none" (the
// default) gives it no network; "allow" lets it reach the destinations of
// Allow, and only those, through the node's egress proxy (the docker
// runtime; the local runtime has no isolation and refuses it); "open"
// gives it the runtime's network, unfiltered, where the node's policy
// permits it (as Network did).
type Egress struct {
	Mode string `json:"mode"`
	// Allow lists the destinations of mode allow: "host", "host:port",
	// "*.example.com[:port]", "192.0.2.1[:port]", "192.0.2.0/24[:port]",
	// "[2001:db8::1]:443", "2001:db8::/32". An entry without a port opens
	// every port. No entry opens the node's own addresses, link-local and
	// cloud metadata addresses, or other sandboxes.
	Allow []string `json:"allow,omitempty"`
}

// Validate checks the policy.
func (e *Egress) Validate() error {
	switch e.Mode {
	case allowlist.ModeNone, allowlist.ModeOpen:
		if len(e.Allow) > 0 {
			return errcode.New(errcode.InvalidRequest, "egress mode %q takes no allow list (mode allow does)", e.Mode)
		}
		return nil
	case allowlist.ModeAllow:
		if len(e.Allow) == 0 {
			return errcode.New(errcode.InvalidRequest, "egress mode allow needs an allow list (mode none allows nothing)")
		}
		_, err := allowlist.Parse(e.Allow)
		return err
	}
	return errcode.New(errcode.InvalidRequest, "egress mode %q: want none, allow or open", clip(e.Mode, 32))
}

// EffectiveEgress is the policy a create asks for: its egress, or, from
// the older network flag, open or none.
func EffectiveEgress(network bool, e *Egress) Egress {
	switch {
	case e != nil:
		return *e
	case network:
		return Egress{Mode: allowlist.ModeOpen}
	}
	return Egress{Mode: allowlist.ModeNone}
}
