package supervisor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"
)

// header returns a frame header claiming n payload bytes.
func header(n uint32, t Type, stream uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, n)
	b = append(b, byte(t))
	return binary.BigEndian.AppendUint32(b, stream)
}

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		{Type: Hello, Payload: []byte(`{"version":1,"pid":7}`)},
		{Type: Call, Stream: 1, Payload: []byte(`{"op":"exec"}`)},
		{Type: Data, Stream: 2, Payload: bytes.Repeat([]byte{0xff}, Chunk)},
		{Type: Stderr, Stream: 3, Payload: []byte{0}},
		{Type: EOF, Stream: 4},
		{Type: Ctl, Stream: 5, Payload: []byte(`{"started":true}`)},
		{Type: Result, Stream: 6, Payload: []byte(`{}`)},
		{Type: Cancel, Stream: math.MaxUint32},
		{Type: Ack, Stream: 8, Payload: []byte{0, 0, 1, 0}},
		{Type: Ping},
		{Type: Pong},
		{Type: Data, Stream: 9, Payload: make([]byte, MaxFrame)}, // exactly the bound
	}
	var wire []byte
	for _, f := range frames {
		wire = appendFrame(wire, f)
	}
	r := bytes.NewReader(wire)
	var hdr [headerSize]byte
	for i, want := range frames {
		got, err := readFrame(r, &hdr)
		if err != nil {
			t.Fatalf("frame %d (%s): %v", i, want.Type, err)
		}
		if got.Type != want.Type || got.Stream != want.Stream || !bytes.Equal(got.Payload, want.Payload) {
			t.Errorf("frame %d: got %s on %d with %d bytes, want %s on %d with %d bytes",
				i, got.Type, got.Stream, len(got.Payload), want.Type, want.Stream, len(want.Payload))
		}
	}
	if _, err := readFrame(r, &hdr); err != io.EOF {
		t.Errorf("after the last frame: got %v, want io.EOF", err)
	}
}

// strictReader serves only the bytes it holds and fails the test if read
// further: readFrame must decide on a header before it reads a payload.
type strictReader struct {
	t *testing.T
	b []byte
}

func (r *strictReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		r.t.Errorf("readFrame read past the header")
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// TestFrameRefused: an oversize length or an unknown type is a protocol
// violation decided on the header alone, before any payload is read or
// allocated.
func TestFrameRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  []byte
	}{
		{"one over MaxFrame", header(MaxFrame+1, Data, 1)},
		{"2 GiB", header(2<<30, Data, 1)},
		{"4 GiB - 1", header(math.MaxUint32, Result, 1)},
		{"oversize hello", header(1<<30, Hello, 0)},
		{"type 0", header(0, 0, 1)},
		{"type past Pong", header(4, Pong+1, 1)},
		{"type 255", header(4, 255, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr [headerSize]byte
			_, err := readFrame(&strictReader{t: t, b: tc.hdr}, &hdr)
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("got %v, want ErrProtocol", err)
			}
		})
	}
}

func TestFrameShort(t *testing.T) {
	full := appendFrame(nil, Frame{Type: Data, Stream: 1, Payload: []byte("hello")})
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"nothing", nil, io.EOF},
		{"part of a header", full[:4], io.ErrUnexpectedEOF},
		{"a header only", full[:headerSize], io.ErrUnexpectedEOF},
		{"part of a payload", full[:len(full)-1], io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr [headerSize]byte
			_, err := readFrame(bytes.NewReader(tc.in), &hdr)
			if err != tc.want {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestTypeString(t *testing.T) {
	for typ, want := range map[Type]string{Hello: "hello", Pong: "pong", Ack: "ack", 0: "type(0)", 12: "type(12)", 255: "type(255)"} {
		if got := typ.String(); got != want {
			t.Errorf("Type(%d).String(): got %q, want %q", uint8(typ), got, want)
		}
	}
}

// FuzzReadFrame: whatever bytes arrive, readFrame never panics, never
// returns a frame over MaxFrame or of an unknown type, refuses a bad
// header as ErrProtocol, and what it returns encodes back to the bytes it
// consumed.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, Frame{Type: Hello, Payload: []byte(`{"version":1}`)}))
	f.Add(appendFrame(nil, Frame{Type: Data, Stream: 3, Payload: []byte("x")}))
	f.Add(appendFrame(appendFrame(nil, Frame{Type: Ping}), Frame{Type: Ack, Stream: 1, Payload: []byte{0, 0, 0, 1}}))
	f.Add(header(2<<30, Data, 1))
	f.Add(header(MaxFrame, Data, 1))
	f.Add(header(0, 0, 0))
	f.Add(header(0, 255, 0))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte{0, 0, 0, 5, 3, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		var hdr [headerSize]byte
		for {
			before := len(in) - r.Len()
			fr, err := readFrame(r, &hdr)
			if err != nil {
				rest := in[before:]
				if len(rest) >= headerSize {
					n, typ := binary.BigEndian.Uint32(rest[:4]), Type(rest[4])
					bad := n > MaxFrame || typ < Hello || typ > Pong
					if bad != errors.Is(err, ErrProtocol) {
						t.Fatalf("header % x: got %v, want ErrProtocol %v", rest[:headerSize], err, bad)
					}
				}
				if !errors.Is(err, ErrProtocol) && err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("got %v, want ErrProtocol, io.EOF or io.ErrUnexpectedEOF", err)
				}
				return
			}
			if len(fr.Payload) > MaxFrame || fr.Type < Hello || fr.Type > Pong {
				t.Fatalf("got a %s frame of %d bytes", fr.Type, len(fr.Payload))
			}
			consumed := in[before : len(in)-r.Len()]
			if enc := appendFrame(nil, fr); !bytes.Equal(enc, consumed) {
				t.Fatalf("re-encoded % x, consumed % x", enc, consumed)
			}
		}
	})
}
