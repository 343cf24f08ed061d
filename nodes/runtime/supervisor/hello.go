package supervisor

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"
)

// HelloMsg is what a supervisor says first on a connection.
type HelloMsg struct {
	// Version is the protocol version it speaks.
	Version int `json:"version"`
	// PID is its process id inside the sandbox (as it says: a sandbox can
	// lie about itself).
	PID int `json:"pid"`
}

// Accept (node's end) reads a supervisor's hello from nc within timeout
// and starts serving the connection. A connection that says nothing in
// time, says something else first, or speaks another version is closed
// and its error wraps ErrProtocol (or the read's error).
func Accept(nc net.Conn, timeout time.Duration, opts Options) (*Conn, HelloMsg, error) {
	_ = nc.SetReadDeadline(time.Now().Add(timeout))
	var hdr [headerSize]byte
	f, err := readFrame(nc, &hdr)
	if err != nil {
		nc.Close()
		return nil, HelloMsg{}, fmt.Errorf("read the supervisor's hello: %w", err)
	}
	var h HelloMsg
	if f.Type != Hello || f.Stream != 0 {
		nc.Close()
		return nil, h, fmt.Errorf("%w: the first frame is %s on stream %d, not hello on stream 0", ErrProtocol, f.Type, f.Stream)
	}
	if err := json.Unmarshal(f.Payload, &h); err != nil {
		nc.Close()
		return nil, h, fmt.Errorf("%w: a malformed hello: %v", ErrProtocol, err)
	}
	if h.Version != Version {
		nc.Close()
		return nil, h, fmt.Errorf("%w: the supervisor speaks version %d, the node %d", ErrProtocol, h.Version, Version)
	}
	_ = nc.SetReadDeadline(time.Time{})
	opts.Node = true
	return NewConn(nc, opts), h, nil
}

// SendHello (supervisor's end) writes the hello to w.
func SendHello(w io.Writer, pid int) error {
	b, _ := json.Marshal(HelloMsg{Version: Version, PID: pid})
	_, err := w.Write(appendFrame(nil, Frame{Type: Hello, Payload: b}))
	return err
}
