package audit

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/paddock-dev/paddock/events"
)

// signedRun is the recorded run as stored messages, each signed by key
// (the registered node event declaring key), except where sign says no.
func signedRun(t *testing.T, key nkeys.KeyPair, sign func(i int, ev events.Event) nkeys.KeyPair) []events.Msg {
	t.Helper()
	pub, _ := key.PublicKey()
	var subj events.Subjects
	var out []events.Msg
	for i, l := range recorded(t) {
		var ev events.Event
		var node events.NodeEvent
		_ = json.Unmarshal(l, &ev)
		_ = json.Unmarshal(l, &node)
		m := events.Msg{StreamSeq: uint64(i + 1), Data: l}
		if node.Kind != "" {
			var info events.NodeInfo
			_ = json.Unmarshal(node.Data, &info)
			info.SigningKey = pub
			node.Data, _ = json.Marshal(info)
			m.Data, _ = json.Marshal(node)
			m.Subject = subj.Node(node.Node, node.Kind)
		} else {
			m.Subject = subj.Session(ev.Tenant, ev.SessionID, ev.Op, ev.Phase)
		}
		signer := key
		if sign != nil && node.Kind == "" {
			signer = sign(i, ev)
		}
		if signer != nil {
			sig, err := signer.Sign(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			m.Signer, _ = signer.PublicKey()
			m.Sig = base64.RawURLEncoding.EncodeToString(sig)
		}
		out = append(out, m)
	}
	return out
}

func audit(msgs []events.Msg, trust Trust) Report {
	c := NewChecker(events.Subjects{}, 1)
	c.SetTrust(trust)
	for _, m := range msgs {
		c.Check(m)
	}
	return c.Report()
}

func failures(r Report) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Kind.Failure() {
			out = append(out, f)
		}
	}
	return out
}

func TestSignatures(t *testing.T) {
	node, _ := nkeys.CreateUser()
	stranger, _ := nkeys.CreateUser()
	pub, _ := node.PublicKey()
	issued := map[string]string{"node-1": pub}
	const victim = 7 // the index of a session event in the recorded run

	t.Run("all signed by the issued key", func(t *testing.T) {
		r := audit(signedRun(t, node, nil), Trust{Issued: issued, RequireSigned: true})
		if f := failures(r); len(f) > 0 {
			t.Fatalf("findings %v", f)
		}
		if len(r.Signers) != 1 || r.Signers[0].Node != "node-1" || r.Signers[0].Trust != "issued" || r.Signers[0].Events != r.Events {
			t.Fatalf("signers %+v, want node-1 issued for all %d events", r.Signers, r.Events)
		}
	})
	t.Run("trusted as registered without an issued key", func(t *testing.T) {
		r := audit(signedRun(t, node, nil), Trust{RequireSigned: true})
		if f := failures(r); len(f) > 0 || r.Signers[0].Trust != "registered" {
			t.Fatalf("findings %v, signers %+v", f, r.Signers)
		}
	})
	for _, c := range []struct {
		name   string
		trust  Trust
		sign   func(i int, ev events.Event) nkeys.KeyPair
		tamper bool
		want   Kind
	}{
		{"unsigned", Trust{Issued: issued, RequireSigned: true}, func(i int, _ events.Event) nkeys.KeyPair {
			return map[bool]nkeys.KeyPair{true: nil, false: node}[i == victim]
		}, false, Unsigned},
		{"a stranger's key, issued keys known", Trust{Issued: issued}, func(i int, _ events.Event) nkeys.KeyPair {
			return map[bool]nkeys.KeyPair{true: stranger, false: node}[i == victim]
		}, false, UnknownSigner},
		{"a stranger's key, registered keys only", Trust{}, func(i int, _ events.Event) nkeys.KeyPair {
			return map[bool]nkeys.KeyPair{true: stranger, false: node}[i == victim]
		}, false, UnknownSigner},
		{"a signature over other bytes", Trust{Issued: issued}, nil, true, BadSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs := signedRun(t, node, c.sign)
			if c.tamper {
				msgs[victim].Sig = msgs[victim+1].Sig
			}
			var ev events.Event
			_ = json.Unmarshal(msgs[victim].Data, &ev)
			r := audit(msgs, c.trust)
			f := failures(r)
			if len(f) != 1 || f[0].Kind != c.want || f[0].Session != ev.SessionID || f[0].Seq != ev.Seq {
				t.Fatalf("findings %v; want one %s at %s seq %d", f, c.want, ev.SessionID, ev.Seq)
			}
		})
	}
	t.Run("unsigned is no failure unless required", func(t *testing.T) {
		r := audit(signedRun(t, node, func(int, events.Event) nkeys.KeyPair { return nil }), Trust{})
		if f := failures(r); len(f) > 0 || len(r.Signers) != 0 {
			t.Fatalf("findings %v, signers %v", f, r.Signers)
		}
	})
}

// rechained returns the recorded run with the node of some session events
// changed by f, and each session's prev_hash chain recomputed so that only
// the change is there to find.
func rechained(t *testing.T, f func(ev *events.Event)) [][]byte {
	t.Helper()
	last := map[string]string{}
	var out [][]byte
	for _, l := range recorded(t) {
		var ev events.Event
		var probe struct{ Kind string }
		_ = json.Unmarshal(l, &probe)
		if probe.Kind != "" || json.Unmarshal(l, &ev) != nil {
			out = append(out, l)
			continue
		}
		f(&ev)
		ev.PrevHash = last[ev.SessionID]
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		last[ev.SessionID] = events.Hash(b)
		out = append(out, b)
	}
	return out
}

// TestHolder: an event written by a node that does not hold the session
// fails the audit; a node that resumed the session holds it from its
// resume start on.
func TestHolder(t *testing.T) {
	lines := rechained(t, func(ev *events.Event) {
		if ev.SessionID == "s-running" && ev.Seq == 5 {
			ev.Node = "node-2"
		}
	})
	r := check(t, lines, 1)
	f := failures(r)
	if len(f) != 1 || f[0].Kind != NotHolder || f[0].Session != "s-running" || f[0].Seq != 5 {
		t.Fatalf("findings %v; want one not_holder at s-running seq 5", f)
	}

	lines = rechained(t, func(ev *events.Event) {
		if ev.SessionID == "s-resumed" && ev.Seq >= 9 {
			ev.Node = "node-2" // resumed on another node
		}
	})
	if f := failures(check(t, lines, 1)); len(f) > 0 {
		t.Fatalf("a resume on another node: findings %v", f)
	}
}
