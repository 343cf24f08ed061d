package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/paddock-dev/paddock/nodes/runtime/local"
)

// call opens a call on the node's c, sends data (then EOF) when it is not
// nil, and returns the data received and the result.
func call(t *testing.T, c *Conn, msg CallMsg, data []byte) ([]byte, ResultMsg) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	b, _ := json.Marshal(msg)
	st, err := c.Open(ctx, b)
	if err != nil {
		t.Fatalf("%s: %v", msg.Op, err)
	}
	if data != nil {
		if _, err := st.Writer(ctx, Data).Write(data); err != nil {
			t.Fatalf("%s: send: %v", msg.Op, err)
		}
		if err := st.Send(ctx, EOF, nil); err != nil {
			t.Fatalf("%s: send: %v", msg.Op, err)
		}
	}
	var got []byte
	for {
		f, err := st.Recv(ctx)
		if err != nil {
			t.Fatalf("%s: %v", msg.Op, err)
		}
		if f.Type == Data {
			got = append(got, f.Payload...)
		}
		if f.Type == Result {
			var res ResultMsg
			if err := json.Unmarshal(f.Payload, &res); err != nil {
				t.Fatalf("%s: result %q: %v", msg.Op, f.Payload, err)
			}
			return got, res
		}
	}
}

// TestServerRun: a supervisor dials the node's socket, says hello and
// serves calls on its workspace; a second one for the same socket returns
// ErrRunning at once (two would take the node's link from each other for
// ever), and the lock goes when the first one ends.
func TestServerRun(t *testing.T) {
	ws, run := t.TempDir(), t.TempDir()
	sock := filepath.Join(run, "node.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv, err := NewServer(local.OpenConfig{Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx, sock) }()
	defer func() {
		cancel()
		<-ran
	}()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c, h, err := Accept(nc, wait, quiet)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	defer c.Close()
	if h.PID != os.Getpid() {
		t.Errorf("hello: pid %d, want %d", h.PID, os.Getpid())
	}

	if _, res := call(t, c, CallMsg{Op: OpWrite, Path: "f.txt", Size: 5, Mode: 0o600}, []byte("hello")); res.Code != "" {
		t.Fatalf("write: %+v", res)
	}
	if got, res := call(t, c, CallMsg{Op: OpRead, Path: "f.txt", Limit: 100}, nil); res.Code != "" || string(got) != "hello" || res.Size != 5 || res.Mode != 0o600 {
		t.Errorf("read: got %q, %+v", got, res)
	}
	if _, res := call(t, c, CallMsg{Op: "format-disk"}, nil); res.Code != "unknown_op" {
		t.Errorf("an unknown op: got %+v, want code unknown_op", res)
	}
	b, _ := json.Marshal(CallMsg{Op: OpRead})
	if st, err := c.Open(t.Context(), b[:len(b)-1]); err != nil {
		t.Fatal(err)
	} else if f, err := st.Recv(t.Context()); err != nil || f.Type != Result || !json.Valid(f.Payload) {
		t.Errorf("a malformed call: got %s %q, %v, want a result", f.Type, f.Payload, err)
	}

	second, err := NewServer(local.OpenConfig{Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Run(t.Context(), sock); !errors.Is(err, ErrRunning) {
		t.Errorf("a second Run: got %v, want ErrRunning", err)
	}
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Errorf("Run: got %v, want context.Canceled", err)
	}
	ran <- nil // for the deferred wait
	unlock, err := lockDir(run)
	if err != nil {
		t.Fatalf("the lock outlived Run: %v", err)
	}
	unlock()
}
