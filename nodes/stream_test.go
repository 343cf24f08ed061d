package nodes_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestStreamingExec: a streaming exec's output comes while it runs, in
// order, stdout and stderr apart, all of it past the reply's cap, with a
// secret redacted even when it straddles two writes; a reader slower than
// the command is waited for; a reader that goes away is dropped and the
// command still ends with its reply.
func TestStreamingExec(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{StreamBufferBytes: 64 << 10, StreamIdleTimeout: 2 * time.Second}})
	ctx := testenv.Context(t, 2*time.Minute)
	cr, err := st.Client.Create(ctx, commands.CreateArgs{SecretEnv: map[string]string{"TOKEN": "hunter22"}})
	if err != nil {
		t.Fatal(err)
	}
	testStreamingExec(t, ctx, st, cr.SessionID)
}

func testStreamingExec(t *testing.T, ctx context.Context, st *testenv.Stack, id string) {
	t.Run("all of it, in order", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		res, err := st.Client.ExecStream(ctx, id, commands.ExecArgs{Shell: `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; head -c 1000000 /dev/zero | tr '\000' b; echo done >&2; exit 3`},
			func(e bool, p []byte) {
				if e {
					stderr.Write(p)
				} else {
					stdout.Write(p)
				}
			})
		if err != nil || res.ExitCode != 3 {
			t.Fatalf("exec: %+v, %v", res.ExitCode, err)
		}
		var want strings.Builder
		for i := range 2000 {
			want.WriteString("line " + strconv.Itoa(i) + "\n")
		}
		want.WriteString(strings.Repeat("b", 1000000))
		if stdout.String() != want.String() || stderr.String() != "done\n" {
			t.Fatalf("streamed %d bytes of stdout (want %d, equal %v), stderr %q", stdout.Len(), want.Len(), stdout.String() == want.String(), stderr.String())
		}
		if !res.StdoutTruncated {
			t.Fatal("the reply's own output is capped and says so")
		}
	})
	t.Run("secret split across writes", func(t *testing.T) {
		var out bytes.Buffer
		_, err := st.Client.ExecStream(ctx, id, commands.ExecArgs{Shell: `printf 'a-%s' "$(printf %.3s "$TOKEN")"; sleep 0.3; printf '%s-z\n' "${TOKEN#???}"`},
			func(_ bool, p []byte) { out.Write(p) })
		if err != nil || out.String() != "a-[REDACTED]-z\n" {
			t.Fatalf("streamed %q, %v", out.String(), err)
		}
	})
	t.Run("a slow reader is waited for", func(t *testing.T) {
		// 1 MB through a 64 KiB buffer, the reader doing a round trip
		// to the node for every chunk it gets: all of it arrives.
		var n int
		_, err := st.Client.ExecStream(ctx, id, commands.ExecArgs{Shell: "head -c 1000000 /dev/zero"},
			func(_ bool, p []byte) {
				n += len(p)
				if _, err := st.Client.Running(ctx, id); err != nil {
					t.Error(err)
				}
			})
		if err != nil || n != 1000000 {
			t.Fatalf("read %d bytes, %v", n, err)
		}
	})
	t.Run("a reader that goes away", func(t *testing.T) {
		// An exec with stream set and nobody reading: after the idle
		// timeout the node drops the stream and the command finishes.
		res, err := st.Client.Exec(ctx, id, commands.ExecArgs{Shell: "head -c 500000 /dev/zero; echo end >&2", Stream: true}, client.WithCommandID(uuid.NewString()))
		if err != nil || strings.TrimSpace(res.Stderr) != "end" {
			t.Fatalf("unread streaming exec: %+v, %v", res, err)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		if _, err := st.Client.Exec(ctx, id, commands.ExecArgs{Argv: []string{"true"}, Stream: true}, func(r *commands.Request) { r.CommandID = "" }); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Fatalf("streaming exec without a command id: %v, want invalid_request", err)
		}
		var res commands.ExecReadResult
		if err := st.Client.Do(ctx, id, commands.OpExecRead, commands.ExecReadArgs{ExecCommandID: "nope"}, &res); err != nil || !res.Unknown {
			t.Fatalf("exec_read of no exec: %+v, %v; want unknown", res, err)
		}
		w := int64(60_000)
		if err := st.Client.Do(ctx, id, commands.OpExecRead, commands.ExecReadArgs{ExecCommandID: "x", WaitMS: &w}, nil); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Fatalf("a 60 s wait: %v, want invalid_request", err)
		}
	})
}
