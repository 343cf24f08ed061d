package nodes_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestSecretsNeverRecorded puts a secret value wherever a client can make
// it appear (another variable's value, argv, a path in an error message,
// output) and checks that no stored event holds it. The secrets are
// chosen to spell what encoded events are made of (digits that are also
// a recorded number, a member name): redaction works on string values,
// so the events stay decodable and their numbers and names intact.
func TestSecretsNeverRecorded(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodeCapture(4096)})
	ctx := testenv.Context(t, 60*time.Second)
	c := st.Client
	const digits, name, plain = "123456", "stdout_bytes", "hunter2-s3cret"
	s, err := c.Create(ctx, commands.CreateArgs{
		Env:       map[string]string{"GREETING": "hello " + plain},
		SecretEnv: map[string]string{"A": digits, "B": name, "C": plain},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: `echo "$A $B $C $GREETING"`}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Argv: []string{"echo", plain}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadFile(ctx, s.SessionID, "dir/"+plain); !errors.Is(err, errcode.ErrNotFound) || strings.Contains(err.Error(), plain) {
		t.Fatalf("read of a missing file named after a secret: %v; want not_found without the secret", err)
	}
	if _, err := c.WriteFile(ctx, s.SessionID, "big", bytes.Repeat([]byte("x"), 123456), 0); err != nil {
		t.Fatal(err)
	}
	evs := sessionEvents(t, st, "default", s.SessionID)
	raw := storedBytes(t, st, s.SessionID)
	for _, secret := range []string{plain, name, digits} {
		if secret == digits || secret == name {
			continue // these also spell a number and a member name, checked below
		}
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("secret %q is in the stored events", secret)
		}
	}
	var sawSize, sawName bool
	for _, ev := range evs {
		if ev.Op == "write" && ev.Phase == events.PhaseFinish {
			d, err := events.DecodeData[events.WriteFinish](ev)
			sawSize = err == nil && d.Size == 123456
		}
		if ev.Op == "exec" && ev.Phase == events.PhaseFinish && strings.Contains(string(ev.Data), `"stdout_bytes"`) {
			sawName = true
		}
		if strings.Contains(ev.Stdout, digits) || strings.Contains(ev.Stdout, name) || strings.Contains(ev.Stdout, plain) {
			t.Errorf("captured stdout %q holds a secret", ev.Stdout)
		}
	}
	if !sawSize || !sawName {
		t.Errorf("the write's size (123456) or the exec's stdout_bytes member did not survive redaction: size %v, name %v", sawSize, sawName)
	}
	create, _ := events.DecodeData[events.CreateStart](evs[0])
	if create.Env["GREETING"] != "hello [REDACTED]" {
		t.Errorf("a variable holding a secret value is recorded as %q, want it redacted", create.Env["GREETING"])
	}
}

// TestShortSecretRefused: a secret shorter than commands.MinSecretBytes
// would blot out ordinary output; create and resume refuse it.
func TestShortSecretRefused(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := st.Client.Create(ctx, commands.CreateArgs{SecretEnv: map[string]string{"T": "1"}}); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("create with a 1-byte secret: got %v, want invalid_request", err)
	}
	s, err := st.Client.Create(ctx, commands.CreateArgs{SecretEnv: map[string]string{"T": "long-enough"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Do(ctx, s.SessionID, commands.OpResume, commands.ResumeArgs{SecretEnv: map[string]string{"T": "x"}}, nil); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("resume with a 1-byte secret: got %v, want invalid_request", err)
	}
}

// TestSecretsGivenOnResume: the values a resume gives are redacted from
// then on, also when they differ from the create's.
func TestSecretsGivenOnResume(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, 60*time.Second)
	c := st.Client
	s := mustCreate(t, ctx, c, commands.CreateArgs{SecretEnv: map[string]string{"TOKEN": "first-value"}})
	if err := c.Do(ctx, s.SessionID, commands.OpPersist, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, s.SessionID, commands.OpResume, commands.ResumeArgs{SecretEnv: map[string]string{"TOKEN": "second-value"}}, nil); err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: `echo "$TOKEN"; echo second-value first-value`})
	if err != nil || res.Stdout != "[REDACTED]\n[REDACTED] [REDACTED]\n" {
		t.Fatalf("exec after resume = %q, %v; want both values redacted", res.Stdout, err)
	}
	if err := c.Do(ctx, s.SessionID, commands.OpResume, commands.ResumeArgs{SecretEnv: map[string]string{"OTHER": "not-declared"}}, nil); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("resume naming a variable the create did not declare secret: got %v, want invalid_request", err)
	}
	raw := storedBytes(t, st, s.SessionID)
	if bytes.Contains(raw, []byte("second-value")) || bytes.Contains(raw, []byte("first-value")) {
		t.Fatal("a secret value is in the stored events")
	}
}

func nodeCapture(limit int) nodes.Config {
	return nodes.Config{Capture: nodes.Capture{Limit: limit}}
}

// storedBytes returns a session's events as stored, one per line.
func storedBytes(t *testing.T, st *testenv.Stack, id string) []byte {
	t.Helper()
	var buf bytes.Buffer
	err := st.Log.Read(testenv.Context(t, 10*time.Second), events.ReadOptions{Filters: []string{st.Log.Subjects().SessionFilter("default", id)}}, func(m events.Msg) error {
		buf.Write(m.Data)
		buf.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
