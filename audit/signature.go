package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/paddock-dev/paddock/events"
)

// The signature findings.
const (
	Unsigned      Kind = "unsigned"       // no signature, where signatures are required
	BadSignature  Kind = "bad_signature"  // the signature does not verify over the stored bytes
	UnknownSigner Kind = "unknown_signer" // a valid signature by a key that may not sign for the event's node
)

// Trust says which keys may sign for which node.
type Trust struct {
	// Issued holds the key an auth store issued to each node (engine auth
	// add-node). A node with an issued key has its events trusted only
	// under that key. A node without one is trusted under the keys its own
	// registered events declared (and signed), which proves only that the
	// same key signed both: say so when it matters.
	Issued map[string]string
	// RequireSigned makes an unsigned session event a failure.
	RequireSigned bool
	// Engines names the writers that are engines (the auth store's engine
	// and admin identities), which may end a lost node's hold on its
	// sessions. Nil: a writer is an engine when it declared a node lost
	// and never registered as a node.
	Engines map[string]bool
}

// Signer says which node signed how many of the checked events, with
// which key, trusted how.
type Signer struct {
	Node   string `json:"node"`
	Key    string `json:"key"`
	Trust  string `json:"trust"` // "issued" or "registered"
	Events int    `json:"events"`
}

// SetTrust sets the keys the checker trusts; without it no signature is
// required and the keys nodes registered are trusted.
func (c *Checker) SetTrust(t Trust) { c.trust = t }

// noteNodeEvent remembers the signing key a node's signed registered
// event declares, and the key an engine's signed lost event declares.
func (c *Checker) noteNodeEvent(m events.Msg) {
	if m.VerifySignature() != nil {
		return
	}
	var ev events.NodeEvent
	if json.Unmarshal(m.Data, &ev) != nil {
		return
	}
	switch ev.Kind {
	case "registered":
		var info events.NodeInfo
		if json.Unmarshal(ev.Data, &info) == nil && info.SigningKey == m.Signer {
			c.register(ev.Node, m.Signer)
		}
		if c.nodes == nil {
			c.nodes = map[string]bool{}
		}
		c.nodes[ev.Node] = true
	case "lost":
		// An engine that declared a node lost writes the end of its
		// sessions under its own name, and declares its key here.
		var d events.NodeLost
		if json.Unmarshal(ev.Data, &d) == nil && d.By != "" && d.SigningKey == m.Signer {
			c.register(d.By, m.Signer)
			if c.engines == nil {
				c.engines = map[string]bool{}
			}
			c.engines[d.By] = true
		}
	}
}

// isEngine reports whether writer is an engine: named so by the trust
// (the auth store's engine and admin identities) when it says, else a
// writer that declared a node lost and never registered as a node.
func (c *Checker) isEngine(writer string) bool {
	if c.trust.Engines != nil {
		return c.trust.Engines[writer]
	}
	return c.engines[writer] && !c.nodes[writer]
}

// register trusts key for the events that name writer, as far as a key
// its writer declared is trusted.
func (c *Checker) register(writer, key string) {
	if c.registered == nil {
		c.registered = map[string]map[string]bool{}
	}
	if c.registered[writer] == nil {
		c.registered[writer] = map[string]bool{}
	}
	c.registered[writer][key] = true
}

// checkSignature checks a session event's signature against the trust.
func (c *Checker) checkSignature(m events.Msg, ev events.Event, f Finding) {
	err := m.VerifySignature()
	switch {
	case errors.Is(err, events.ErrUnsigned):
		if c.trust.RequireSigned {
			f.Kind, f.Detail = Unsigned, fmt.Sprintf("%s %s by node %s carries no signature", ev.Op, ev.Phase, orNone(ev.Node))
			c.find(f)
		}
		return
	case err != nil:
		f.Kind, f.Detail = BadSignature, fmt.Sprintf("%s %s claimed by node %s: %v", ev.Op, ev.Phase, orNone(ev.Node), err)
		c.find(f)
		return
	}
	trust := ""
	if issued, ok := c.trust.Issued[ev.Node]; ok {
		if issued == m.Signer {
			trust = "issued"
		}
	} else if c.registered[ev.Node][m.Signer] {
		trust = "registered"
	}
	if trust == "" {
		f.Kind, f.Detail = UnknownSigner, fmt.Sprintf("%s %s claims node %s but is signed by %s, a key not issued to or registered by that node", ev.Op, ev.Phase, orNone(ev.Node), m.Signer)
		c.find(f)
		return
	}
	if c.signers == nil {
		c.signers = map[[2]string]*Signer{}
	}
	k := [2]string{ev.Node, m.Signer}
	s := c.signers[k]
	if s == nil {
		s = &Signer{Node: ev.Node, Key: m.Signer, Trust: trust}
		c.signers[k] = s
	}
	s.Events++
}

// signerList returns the signers by node and key.
func (c *Checker) signerList() []Signer {
	out := make([]Signer, 0, len(c.signers))
	for _, s := range c.signers {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Key < out[j].Key
	})
	return out
}
