package supervisor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version a supervisor announces in its hello; a
// node refuses another.
const Version = 1

// Bounds of the protocol. A peer that breaks one is a protocol violation:
// its connection is closed.
const (
	// MaxFrame bounds a frame's payload (a call's or result's JSON, a
	// chunk of data).
	MaxFrame = 1 << 20
	// Chunk is the most data one data frame carries.
	Chunk = 32 << 10
	// Window is how many bytes of data a sender may have unacknowledged on
	// one stream; a receiver holds at most this much per stream.
	Window = 256 << 10
	// MaxQueued bounds the messages a receiver holds per stream (small
	// frames count too).
	MaxQueued = 4096
)

// Type is a frame's type.
type Type uint8

// The frame types. The node opens every stream (with a call); the
// supervisor answers on it.
const (
	// Hello (supervisor→node, stream 0) opens a connection: JSON Hello.
	Hello Type = 1
	// Call (node→supervisor) opens a stream: JSON Call.
	Call Type = 2
	// Data carries bytes on a stream: stdout, file content, stdin,
	// listing JSON. It counts against the stream's window.
	Data Type = 3
	// Stderr (supervisor→node) carries an exec's stderr bytes; it counts
	// against the window as Data does.
	Stderr Type = 4
	// EOF says the sender sends no more data on the stream.
	EOF Type = 5
	// Ctl carries JSON control on a stream: Control from the node (resize,
	// signal), Started from the supervisor.
	Ctl Type = 6
	// Result (supervisor→node) ends a stream: JSON Result.
	Result Type = 7
	// Cancel (node→supervisor) abandons a stream; the supervisor ends
	// what runs for it and still sends its Result.
	Cancel Type = 8
	// Ack returns window credit: a 4-byte big-endian count of data bytes
	// consumed.
	Ack Type = 9
	// Ping (node→supervisor, stream 0) asks for a Pong.
	Ping Type = 10
	// Pong (supervisor→node, stream 0) answers a Ping.
	Pong Type = 11
)

func (t Type) String() string {
	names := [...]string{"", "hello", "call", "data", "stderr", "eof", "ctl", "result", "cancel", "ack", "ping", "pong"}
	if int(t) < len(names) && t != 0 {
		return names[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// headerSize is the size of a frame's header: payload length (4 bytes,
// big-endian), type (1), stream id (4).
const headerSize = 9

// ErrProtocol is wrapped by every protocol violation a peer commits.
var ErrProtocol = errors.New("supervisor protocol violation")

// Frame is one frame on the wire.
type Frame struct {
	Type    Type
	Stream  uint32
	Payload []byte
}

// appendFrame appends f's encoding to b.
func appendFrame(b []byte, f Frame) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.Payload)))
	b = append(b, byte(f.Type))
	b = binary.BigEndian.AppendUint32(b, f.Stream)
	return append(b, f.Payload...)
}

// readFrame reads one frame from r. A payload over MaxFrame or an unknown
// type is ErrProtocol before the payload is read; a short read is
// io.ErrUnexpectedEOF (io.EOF at a frame boundary).
func readFrame(r io.Reader, hdr *[headerSize]byte) (Frame, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[0:4])
	t := Type(hdr[4])
	if n > MaxFrame {
		return Frame{}, fmt.Errorf("%w: a %s frame of %d bytes (the bound is %d)", ErrProtocol, t, n, MaxFrame)
	}
	if t < Hello || t > Pong {
		return Frame{}, fmt.Errorf("%w: unknown frame type %d", ErrProtocol, uint8(t))
	}
	f := Frame{Type: t, Stream: binary.BigEndian.Uint32(hdr[5:9])}
	if n > 0 {
		f.Payload = make([]byte, n)
		if _, err := io.ReadFull(r, f.Payload); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
	}
	return f, nil
}
