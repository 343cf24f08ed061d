package nodes_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/testenv"
)

// TestNodeWaitsForStream: a node started before the engine has made the
// events stream (a fleet's processes start in any order) waits for it
// instead of failing, and registers once, when the stream appears; with
// no stream at all, its start ends with its context, unavailable.
func TestNodeWaitsForStream(t *testing.T) {
	b := testenv.StartBroker(t)
	nc := testenv.Connect(t, b.ClientURL())
	js := testenv.JetStream(t, nc)
	rt, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}

	// No stream and a short context: the start gives up.
	early, err := nodes.New(nc, events.NewLog(js, "", ""), nodes.Config{ID: "early"}, nil, rt)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err = early.Start(sctx)
	cancel()
	if err == nil {
		t.Fatal("a node started with no events stream and a 500ms context started")
	}

	var logs lockedBuffer
	a, err := nodes.New(nc, events.NewLog(js, "", ""), nodes.Config{ID: "patient"}, slog.New(slog.NewTextHandler(&logs, nil)), rt)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- a.Start(testenv.Context(t, time.Minute)) }() // the test waits for it below
	testenv.Eventually(t, 30*time.Second, func() error {                // it tried, and waits
		select {
		case err := <-started:
			t.Fatalf("the node's start ended before there was a stream: %v", err)
		default:
		}
		if !strings.Contains(logs.String(), "waiting for the events stream") {
			return errors.New("the node has not said it waits")
		}
		return nil
	})
	// Until its registration is recorded the node takes no command (a
	// create's events would precede the event registering its key) and
	// answers no announce with a heartbeat.
	hb, err := nc.SubscribeSync(commands.Subjects{}.Heartbeat("patient"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(commands.Subjects{}.Announce(), nil); err != nil {
		t.Fatal(err)
	}
	reply, err := nc.Request(commands.Subjects{}.Node("patient", "create"), []byte(`{}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(reply.Data), string(errcode.Unavailable)) || !strings.Contains(string(reply.Data), "registration") {
		t.Fatalf("a create before the node registered: %s; want unavailable, not registered yet", reply.Data)
	}
	if m, err := hb.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("the node heartbeat before it registered: %s", m.Data)
	}
	if _, err := events.EnsureStream(testenv.Context(t, 30*time.Second), js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatalf("start once the stream exists: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	s, err := js.Stream(testenv.Context(t, 10*time.Second), events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(testenv.Context(t, 10*time.Second), events.Subjects{}.Node("patient", "registered"))
	if err != nil || msg == nil {
		t.Fatalf("no registered event of the node: %v", err)
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
