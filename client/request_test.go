package client_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/testenv"
)

// TestEncodeRequest: args become the request's, and a request over the
// limit is refused before it is sent.
func TestEncodeRequest(t *testing.T) {
	body, err := client.EncodeRequest(commands.Request{Version: commands.Version, Actor: "ops"}, commands.LookupArgs{SessionID: "s1"})
	if err != nil || !strings.Contains(string(body), `"session_id":"s1"`) || !strings.Contains(string(body), `"actor":"ops"`) {
		t.Fatalf("got %s, %v; want the actor and the args", body, err)
	}
	_, err = client.EncodeRequest(commands.Request{}, strings.Repeat("x", commands.MaxRequestBytes))
	if !errors.Is(err, errcode.ErrPayloadTooLarge) {
		t.Fatalf("a large request: got %v, want payload_too_large", err)
	}
	if _, err := client.EncodeRequest(commands.Request{}, func() {}); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("args that do not encode: got %v, want invalid_request", err)
	}
}

// TestDecodeReply: a result decodes into out, an error reply is its
// error, and what is no reply is internal.
func TestDecodeReply(t *testing.T) {
	data, err := commands.ResultReply(commands.LookupResult{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := client.DecodeReply(data)
	if err != nil {
		t.Fatal(err)
	}
	var res commands.LookupResult
	if err := client.ReplyResult(rep, &res); err != nil || res.Node != "n1" {
		t.Fatalf("result: got %+v, %v; want node n1", res, err)
	}
	rep, err = client.DecodeReply(commands.ErrorReply(errcode.New(errcode.SessionNotFound, "no s1")))
	if err != nil {
		t.Fatal(err)
	}
	if err := client.ReplyResult(rep, &res); !errors.Is(err, errcode.ErrSessionNotFound) {
		t.Fatalf("error reply: got %v, want session_not_found", err)
	}
	if _, err := client.DecodeReply([]byte("not json")); !errors.Is(err, errcode.ErrInternal) {
		t.Fatalf("garbage: got %v, want internal", err)
	}
}

// TestRequesterResend: with Resend, a request that finds no responder is
// sent again until one subscribes; without, it fails at once.
func TestRequesterResend(t *testing.T) {
	b := testenv.StartBroker(t)
	nc := testenv.Connect(t, b.ClientURL())
	ctx := testenv.Context(t, 20*time.Second)
	if _, err := (client.Requester{Conn: nc}).Send(ctx, "svc.x", nil, []byte("hi")); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no resend: got %v, want no responders", err)
	}
	var sent atomic.Int64
	r := client.Requester{Conn: nc, Resend: 10 * time.Second}
	done := make(chan error, 1)
	go func() { // owned by the test: it waits on done
		m, err := r.Send(ctx, "svc.x", nats.Header{"K": []string{"v"}}, []byte("hi"))
		if err == nil && (string(m.Data) != "hi v" || sent.Load() == 0) {
			err = errors.New("wrong answer: " + string(m.Data))
		}
		done <- err
	}()
	// The responder comes only after a first try found none.
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, err := nc.Request("svc.x", nil, 50*time.Millisecond); !errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		sent.Add(1)
		return nil
	})
	sub, err := nc.Subscribe("svc.x", func(m *nats.Msg) { _ = m.Respond([]byte(string(m.Data) + " " + m.Header.Get("K"))) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("no answer")
	}
}
