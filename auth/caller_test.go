package auth_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/errcode"
)

// TestDelivered: what JetStream sends (a pushed or pulled message, flow
// control, a heartbeat, a pull's end, a direct get, a republish) is
// refused as permission_denied, by CallerOf too; a sender's request, with
// or without the server's stamp, is not. RequireReply refuses a message
// without a reply subject as well (a JetStream API response).
func TestDelivered(t *testing.T) {
	msg := func(reply string, hdr map[string]string) *nats.Msg {
		m := nats.NewMsg("sbx.node.n1.cordon")
		m.Reply = reply
		for k, v := range hdr {
			m.Header.Set(k, v)
		}
		return m
	}
	for _, c := range []struct {
		name             string
		m                *nats.Msg
		delivered, noReq bool
	}{
		{"request", msg("_INBOX.UA.x", nil), false, false},
		{"stamped request", msg("_R_.abc.x", map[string]string{auth.RequestInfoHeader: `{"acc":"acme","user":"UA"}`}), false, false},
		{"traced request", msg("_INBOX.UA.x", map[string]string{"traceparent": "00-x"}), false, false},
		{"published, no reply", msg("", nil), false, true},
		{"pushed", msg("$JS.ACK.SBX_EVENTS.c.1.2.3.4.5", nil), true, true},
		{"pushed v2", msg("$JS.ACK.dom.hash.SBX_EVENTS.c.1.2.3.4.5.6", nil), true, true},
		{"pushed, forged stamp", msg("$JS.ACK.SBX_EVENTS.c.1.2.3.4.5", map[string]string{auth.RequestInfoHeader: `{"acc":"PADDOCK","user":"UA"}`}), true, true},
		{"flow control", msg("$JS.FC.SBX_EVENTS.c.x", map[string]string{"Status": "100"}), true, true},
		{"heartbeat", msg("", map[string]string{"Status": "100", "Nats-Last-Consumer": "3"}), true, true},
		{"direct get", msg("", map[string]string{"Nats-Stream": "SBX_EVENTS", "Nats-Subject": "sbx.evt.x"}), true, true},
		{"direct get, lower case", msg("", map[string]string{"nats-stream": "SBX_EVENTS"}), true, true},
		{"headers only", msg("$JS.ACK.S.c.1.1.1.1.0", map[string]string{"Nats-Msg-Size": "3"}), true, true},
	} {
		err := auth.Delivered(c.m)
		if (err != nil) != c.delivered || (err != nil && errcode.Of(err) != errcode.PermissionDenied) {
			t.Errorf("%s: Delivered = %v, want refused %v", c.name, err, c.delivered)
		}
		if _, err := auth.CallerOf(c.m); (err != nil) != c.delivered {
			t.Errorf("%s: CallerOf = %v, want refused %v", c.name, err, c.delivered)
		}
		if err := auth.RequireReply(c.m); (err != nil) != c.noReq {
			t.Errorf("%s: RequireReply = %v, want refused %v", c.name, err, c.noReq)
		}
	}
}

// TestOperator: only an unstamped sender (the PADDOCK account, whose
// permissions keep those subjects to the engine and admins) may send an
// operator's command.
func TestOperator(t *testing.T) {
	if err := (auth.Caller{}).Operator(); err != nil {
		t.Fatalf("unstamped: %v", err)
	}
	for _, c := range []auth.Caller{{Account: "acme", User: "UA"}, {Account: auth.PaddockAccount, User: "UA"}} {
		if err := c.Operator(); errcode.Of(err) != errcode.PermissionDenied {
			t.Fatalf("stamped %+v: %v, want permission_denied", c, err)
		}
	}
}

// BenchmarkRequireReply is what every command now pays before its
// handler: a command stamped by its tenant's import, with a trace header.
func BenchmarkRequireReply(b *testing.B) {
	m := &nats.Msg{Subject: "sbx.cmd.acme.s1.exec", Reply: "_INBOX.x.y", Header: nats.Header{
		"Nats-Request-Info": []string{`{"acc":"acme","user":"UABC"}`},
		"Traceparent":       []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}}
	for b.Loop() {
		if err := auth.RequireReply(m); err != nil {
			b.Fatal(err)
		}
	}
}
