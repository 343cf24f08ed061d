// Command evil is a hostile supervisor for tests: a process of a sandbox
// that dials the node's socket, as the real supervisor does, and then
// breaks the protocol in one way. The node must give it up with typed
// errors for its calls and take the real supervisor back.
//
//	evil [-socket /.paddock/run/node.sock] [-calls n] mode
//
// Modes (each but badhello, mute and silent says hello, answers pings and
// waits for n calls, 1 by default, before it misbehaves):
//
//	flood      endless data frames on stream ids the node never opened
//	window     endless data frames of MaxFrame bytes on the first call's
//	           stream, far beyond the window (the first already is)
//	oversize   a header claiming 2 GiB on the first call's stream
//	call       a call (and a ping) to the node, which only the node sends
//	malformed  a result that is not JSON to every call, then hangs up
//	silent     says hello, then reads and never answers anything
//	badhello   says garbage instead of hello
//	mute       says nothing at all
//
// It makes one connection and exits once the node hangs up. It is built
// static (CGO_ENABLED=0) by testenv.EvilSupervisor and is no part of the
// product.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/paddock-dev/paddock/nodes/runtime/supervisor"
)

func main() {
	socket := flag.String("socket", "/.paddock/run/node.sock", "the node's unix socket")
	calls := flag.Int("calls", 1, "calls to await before misbehaving")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: evil [-socket path] [-calls n] mode")
		os.Exit(2)
	}
	if err := run(*socket, flag.Arg(0), *calls); err != nil {
		fmt.Fprintln(os.Stderr, "evil:", err)
		os.Exit(1)
	}
}

// frame encodes a frame as the protocol lays it out: payload length,
// type, stream id, payload. It is written here, not borrowed from the
// package, as a hostile peer would.
func frame(t supervisor.Type, stream uint32, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	b = append(b, byte(t))
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

type peer struct {
	nc  net.Conn
	hdr [9]byte
}

func (p *peer) write(b []byte) error {
	_, err := p.nc.Write(b)
	return err
}

// read reads one frame's header and payload (of any size the node sends).
func (p *peer) read() (supervisor.Type, uint32, []byte, error) {
	if _, err := io.ReadFull(p.nc, p.hdr[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(p.hdr[0:4])
	if n > supervisor.MaxFrame {
		return 0, 0, nil, fmt.Errorf("the node sent a frame of %d bytes", n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(p.nc, payload); err != nil {
		return 0, 0, nil, err
	}
	return supervisor.Type(p.hdr[4]), binary.BigEndian.Uint32(p.hdr[5:9]), payload, nil
}

// awaitCalls answers pings until n calls have come and returns their
// stream ids.
func (p *peer) awaitCalls(n int) ([]uint32, error) {
	var ids []uint32
	for len(ids) < n {
		t, id, _, err := p.read()
		if err != nil {
			return ids, err
		}
		switch t {
		case supervisor.Ping:
			if err := p.write(frame(supervisor.Pong, 0, nil)); err != nil {
				return ids, err
			}
		case supervisor.Call:
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// drain reads until the node hangs up.
func (p *peer) drain() error {
	_, err := io.Copy(io.Discard, p.nc)
	return err
}

func run(socket, mode string, calls int) error {
	nc, err := net.Dial("unix", socket)
	if err != nil {
		return err
	}
	defer nc.Close()
	p := &peer{nc: nc}
	switch mode {
	case "mute":
		return p.drain()
	case "badhello":
		if err := p.write([]byte("GET / HTTP/1.1\r\nHost: node\r\n\r\n")); err != nil {
			return err
		}
		return p.drain()
	}
	if err := p.write(frame(supervisor.Hello, 0, fmt.Appendf(nil, `{"version":%d,"pid":%d}`, supervisor.Version, os.Getpid()))); err != nil {
		return err
	}
	if mode == "silent" {
		return p.drain()
	}
	ids, err := p.awaitCalls(calls)
	if err != nil {
		return err
	}
	switch mode {
	case "flood":
		chunk := make([]byte, supervisor.Chunk)
		for id := ids[len(ids)-1] + 1000; ; id++ {
			if err := p.write(frame(supervisor.Data, id, chunk)); err != nil {
				return nil // the node hung up, as it must
			}
		}
	case "window":
		big := make([]byte, supervisor.MaxFrame)
		for {
			if err := p.write(frame(supervisor.Data, ids[0], big)); err != nil {
				return nil
			}
		}
	case "oversize":
		b := frame(supervisor.Data, ids[0], nil)
		binary.BigEndian.PutUint32(b[0:4], 2<<30)
		if err := p.write(append(b, make([]byte, 1<<16)...)); err != nil {
			return nil
		}
		return p.drain()
	case "call":
		if err := p.write(append(frame(supervisor.Call, ids[0]+1, []byte(`{"op":"exec","argv":["true"]}`)), frame(supervisor.Ping, 0, nil)...)); err != nil {
			return nil
		}
		return p.drain()
	case "malformed":
		for _, id := range ids {
			if err := p.write(frame(supervisor.Result, id, []byte(`{"code": not json`))); err != nil {
				return err
			}
		}
		return nil // hangs up
	}
	return errors.New("unknown mode " + mode)
}
