package client

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// This file is the one request/reply path of Paddock's Go side: encode a
// commands.Request, send it (again while nobody answers, if asked), decode
// the commands.Reply. The Client's commands, the operator's node commands
// (NodeRequest) and the scheduler's forwarding to a node all use it.

// EncodeRequest returns req with args as its arguments (none when args is
// nil), encoded. It fails with invalid_request when args or req do not
// encode, and with payload_too_large when the request exceeds
// commands.MaxRequestBytes.
func EncodeRequest(req commands.Request, args any) ([]byte, error) {
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, errcode.Wrap(errcode.InvalidRequest, err, "encode args")
		}
		req.Args = b
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidRequest, err, "encode request")
	}
	if len(body) > commands.MaxRequestBytes {
		return nil, errcode.New(errcode.PayloadTooLarge, "request of %d bytes exceeds %d", len(body), commands.MaxRequestBytes)
	}
	return body, nil
}

// Requester sends encoded requests on a connection.
type Requester struct {
	// Conn is the connection requests go out on.
	Conn *nats.Conn
	// Resend is how long a request that found no responder is sent again
	// before Send gives up on it (0: not sent again). Nothing received
	// such a request, so sending it again is always safe.
	Resend time.Duration
}

// Send sends body on subj, with hdr when it is not nil, and returns the
// reply message. It fails with the transport's error as is (nats.ErrNoResponders
// once Resend has passed, a ctx error, nats.ErrMaxPayload): callers say
// what it means for them.
func (r Requester) Send(ctx context.Context, subj string, hdr nats.Header, body []byte) (*nats.Msg, error) {
	giveUp := time.Now().Add(r.Resend)
	wait := 5 * time.Millisecond
	for {
		var msg *nats.Msg
		var err error
		if hdr == nil {
			msg, err = r.Conn.RequestWithContext(ctx, subj, body)
		} else {
			msg, err = r.Conn.RequestMsgWithContext(ctx, &nats.Msg{Subject: subj, Header: hdr, Data: body})
		}
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().Add(wait).After(giveUp) {
			return msg, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// DecodeReply decodes a reply. It fails with internal when data is not a
// reply.
func DecodeReply(data []byte) (commands.Reply, error) {
	// encoding/json/v2 decodes in one pass; v1 validates the whole
	// reply before it decodes it, and again for the result (large
	// streaming replies spent most of the client's time there).
	var rep commands.Reply
	if err := jsonv2.Unmarshal(data, &rep); err != nil {
		return commands.Reply{}, errcode.Wrap(errcode.Internal, err, "decode reply")
	}
	return rep, nil
}

// ReplyResult returns the reply's error (an *errcode.Error) if it carries
// one, else decodes its result into out (nothing when out is nil). It
// fails with internal when the result does not decode.
func ReplyResult(rep commands.Reply, out any) error {
	if rep.Error != nil {
		return rep.Error.Err()
	}
	if out != nil && len(rep.Result) > 0 {
		if err := jsonv2.Unmarshal(rep.Result, out); err != nil {
			return errcode.Wrap(errcode.Internal, err, "decode result")
		}
	}
	return nil
}
