package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StoredMsg is a message as the JetStream API's message get returns it.
type StoredMsg struct {
	Subject string `json:"subject"`
	Seq     uint64 `json:"seq"`
	// Header is the message's header block as stored (nats.DecodeHeadersMsg
	// reads it); Data is its payload.
	Header []byte `json:"hdrs"`
	Data   []byte `json:"data"`
}

// LeaderGet sends the JetStream API's message get req (its JSON fields:
// seq, last_by_subj, next_by_subj) to stream and returns the message, nil
// when there is none. The API's get is answered by the stream's leader,
// whose state is what the next append is checked against; a direct get
// (what jetstream.Stream.GetMsg and GetLastMsgForSubject send on a stream
// that allows them) may be answered by a follower that is still catching
// up after a restart or a leader change. Each get is bounded by the
// JetStream context's timeout (5 s when it has none): no leader means no
// answer.
func LeaderGet(ctx context.Context, js jetstream.JetStream, stream string, req map[string]any) (*StoredMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	prefix := js.Options().APIPrefix // set only by jetstream.NewWithAPIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	} else if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	timeout := js.Options().DefaultTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := js.Conn().RequestWithContext(ctx, prefix+"STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	var rep struct {
		Message *StoredMsg `json:"message"`
		Error   *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return nil, fmt.Errorf("message get on %s: %w", stream, err)
	}
	switch {
	case rep.Error != nil && rep.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound):
		return nil, nil
	case rep.Error != nil:
		return nil, fmt.Errorf("message get on %s: %s (%d)", stream, rep.Error.Description, rep.Error.ErrCode)
	case rep.Message == nil:
		return nil, fmt.Errorf("message get on %s: %w", stream, errors.New("an answer without a message"))
	}
	return rep.Message, nil
}

// tailOf is the Tail of a session's last event, m, with its headers h
// (nil: decoded from m.Header).
func tailOf(m *StoredMsg, h nats.Header) (Tail, error) {
	ev, err := Parse(m.Data)
	if err != nil {
		return Tail{}, fmt.Errorf("decode event at stream seq %d: %w", m.Seq, err)
	}
	if h == nil && len(m.Header) > 0 {
		if h, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			return Tail{}, fmt.Errorf("headers of the event at stream seq %d: %w", m.Seq, err)
		}
	}
	signer := h.Get(SignerHeader)
	signed := VerifySignature(signer, h.Get(SigHeader), m.Data) == nil
	return Tail{Event: &ev, StreamSeq: m.Seq, Hash: Hash(m.Data), Signed: signed, Signer: signer}, nil
}
