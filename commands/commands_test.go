package commands

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/errcode"
)

func TestCheckToken(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"default", true}, {"tenant-1_A", true}, {"550e8400-e29b-41d4-a716-446655440000", true},
		{"", false}, {"a.b", false}, {"*", false}, {"a>", false}, {">", false}, {"a b", false},
		{"a\tb", false}, {"a\nb", false}, {"a/b", false}, {`a\b`, false}, {"a\x00b", false},
		{strings.Repeat("x", MaxTokenLen), true}, {strings.Repeat("x", MaxTokenLen+1), false},
	} {
		err := CheckToken("tenant", tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("CheckToken(%q) = %v, want ok=%v", tc.in, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("CheckToken(%q) error %v is not invalid_request", tc.in, err)
		}
	}
}

func TestParseSession(t *testing.T) {
	s := Subjects{}
	tenant, session, op, ok := s.ParseSession(s.Session("t1", "s1", OpExec))
	if !ok || tenant != "t1" || session != "s1" || op != OpExec {
		t.Fatalf("got %q %q %q %v, want t1 s1 exec true", tenant, session, op, ok)
	}
	for _, bad := range []string{"sbx.cmd.t1.create", "sbx.cmd.t.s.exec.x", "other.cmd.t.s.exec"} {
		if _, _, _, ok := s.ParseSession(bad); ok {
			t.Errorf("ParseSession(%q) ok, want not", bad)
		}
	}
	if tn, ok := s.ParseTenant(s.Create("acme")); !ok || tn != "acme" {
		t.Fatalf("ParseTenant = %q %v, want acme", tn, ok)
	}
}

func TestDecodeStrict(t *testing.T) {
	var args ExecArgs
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"args":{"argv":["true"]}}`, true},
		{``, true},
		{`{"args":{"argv":["true"],"nope":1}}`, false},
		{`{"nope":1}`, false},
		{`{"args":{"argv":"true"}}`, false},
		{`{} trailing`, false},
		{`{"args":`, false},
		{`null`, true},
	} {
		_, err := DecodeRequest([]byte(tc.body), &args)
		if (err == nil) != tc.ok {
			t.Errorf("DecodeRequest(%s) = %v, want ok=%v", tc.body, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("DecodeRequest(%s) error %v is not invalid_request", tc.body, err)
		}
	}
	big := make([]byte, MaxRequestBytes+1)
	if _, err := DecodeRequest(big, &args); !errors.Is(err, errcode.ErrPayloadTooLarge) {
		t.Fatalf("oversized: got %v, want payload_too_large", err)
	}
}

func TestCreateArgsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    CreateArgs
		ok   bool
	}{
		{"zero", CreateArgs{}, true},
		{"full", CreateArgs{Runtime: "docker", CPUs: 2, MemoryBytes: 1 << 30, Env: map[string]string{"A": "1"}, WorkspaceRoot: "/work"}, true},
		{"bad runtime", CreateArgs{Runtime: "vm"}, false},
		{"negative cpus", CreateArgs{CPUs: -1}, false},
		{"absurd cpus", CreateArgs{CPUs: 1e9}, false},
		{"negative memory", CreateArgs{MemoryBytes: -1}, false},
		{"tiny memory", CreateArgs{MemoryBytes: 1024}, false},
		{"absurd memory", CreateArgs{MemoryBytes: 1 << 50}, false},
		{"env name with =", CreateArgs{Env: map[string]string{"A=B": "1"}}, false},
		{"secret and env", CreateArgs{Env: map[string]string{"A": "1"}, SecretEnv: map[string]string{"A": "2"}}, false},
		{"relative root", CreateArgs{WorkspaceRoot: "work"}, false},
		{"root /", CreateArgs{WorkspaceRoot: "/"}, false},
		{"bad session id", CreateArgs{SessionID: "a.b"}, false},
		{"loosened", CreateArgs{Network: true, User: "0", PidsLimit: 100}, true},
		{"negative pids", CreateArgs{PidsLimit: -1}, false},
		{"absurd pids", CreateArgs{PidsLimit: 1 << 40}, false},
		{"user with space", CreateArgs{User: "root --privileged"}, false},
		{"user with newline", CreateArgs{User: "a\nb"}, false},
		{"disk", CreateArgs{DiskBytes: 2 << 30}, true},
		{"disk at the minimum", CreateArgs{DiskBytes: MinDisk}, true},
		{"negative disk", CreateArgs{DiskBytes: -1}, false},
		{"tiny disk", CreateArgs{DiskBytes: 1}, false},
		{"absurd disk", CreateArgs{DiskBytes: MaxDisk + 1}, false},
	} {
		err := tc.a.Validate()
		if (err == nil) != tc.ok || (err != nil && errcode.Of(err) != errcode.InvalidRequest) {
			t.Errorf("%s: Validate() = %v, want ok=%v (or invalid_request)", tc.name, err, tc.ok)
		}
	}
	// Garbage on the wire is refused by the strict decoder, typed.
	for _, raw := range []string{`{"disk_bytes":"2g"}`, `{"disk_bytes":1.5}`, `{"disk_bytes":-5}`, `{"disk_bytes":99999999999999999999}`} {
		var a CreateArgs
		req, _ := json.Marshal(Request{Version: Version, Args: json.RawMessage(raw)})
		_, err := DecodeRequest(req, &a)
		if err == nil {
			err = a.Validate()
		}
		if errcode.Of(err) != errcode.InvalidRequest {
			t.Errorf("create args %s: got %v, want invalid_request", raw, err)
		}
	}
}

func TestExecArgsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    ExecArgs
		ok   bool
	}{
		{"argv", ExecArgs{Argv: []string{"true"}}, true},
		{"shell", ExecArgs{Shell: "true", User: "1000:1000", TimeoutMS: 5}, true},
		{"neither", ExecArgs{}, false},
		{"both", ExecArgs{Argv: []string{"true"}, Shell: "true"}, false},
		{"empty argv0", ExecArgs{Argv: []string{""}}, false},
		{"NUL", ExecArgs{Shell: "a\x00b"}, false},
		{"negative timeout", ExecArgs{Shell: "true", TimeoutMS: -1}, false},
		{"absurd timeout", ExecArgs{Shell: "true", TimeoutMS: 1 << 50}, false},
		{"negative output", ExecArgs{Shell: "true", MaxOutputBytes: -1}, false},
		{"bad user", ExecArgs{Shell: "true", User: "a b"}, false},
		{"bad env", ExecArgs{Shell: "true", Env: map[string]string{"": "x"}}, false},
	} {
		err := tc.a.Validate()
		if (err == nil) != tc.ok || (err != nil && errcode.Of(err) != errcode.InvalidRequest) {
			t.Errorf("%s: Validate() = %v, want ok=%v (or invalid_request)", tc.name, err, tc.ok)
		}
	}
}

func TestErrorReplyRoundTrip(t *testing.T) {
	b := ErrorReply(errcode.New(errcode.SessionNotFound, "gone"))
	var rep Reply
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Version != Version {
		t.Errorf("reply version %q, want %q", rep.Version, Version)
	}
	if rep.Error == nil || rep.Error.Code != errcode.SessionNotFound || rep.Error.Retryable {
		t.Fatalf("reply = %+v, want session_not_found, not retryable", rep.Error)
	}
	if !errors.Is(rep.Error.Err(), errcode.ErrSessionNotFound) {
		t.Fatal("decoded error does not match ErrSessionNotFound")
	}
	b = ErrorReply(errors.New("nats: API error: code=400 err_code=10071 secret detail"))
	if err := json.Unmarshal(b, &rep); err != nil || rep.Error.Code != errcode.Internal || rep.Error.Retryable {
		t.Fatalf("plain error reply = %+v, %v; want internal, not retryable", rep.Error, err)
	}
	if strings.Contains(string(b), "10071") || strings.Contains(string(b), "secret") {
		t.Fatalf("plain error reply %s leaks the error's text", b)
	}
	b = ErrorReply(errcode.Wrap(errcode.Unavailable, errors.New("nats: API error: code=503"), "append event"))
	if strings.Contains(string(b), "nats:") {
		t.Fatalf("wrapped error reply %s leaks its cause", b)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"command_id":"x","args":{"argv":["a"],"timeout_ms":5}}`))
	f.Add([]byte(`{"args":{"shell":"echo"}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"version":"1.9","x":{"y":[1,2]},"args":{"argv":["a"],"z":null}}`))
	f.Add([]byte(`{"args":{"argv":["a"],"argv":["b"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var args ExecArgs
		req, err := DecodeRequest(data, &args)
		if err != nil {
			if c := errcode.Of(err); c != errcode.InvalidRequest && c != errcode.PayloadTooLarge && c != errcode.UnsupportedVersion {
				t.Fatalf("decode error with code %s: %v", errcode.Of(err), err)
			}
			return
		}
		if req.CommandID != "" && CheckToken("c", req.CommandID) != nil {
			t.Fatalf("accepted invalid command id %q", req.CommandID)
		}
		_ = args.Validate() // must not panic
	})
}

func TestShortSecrets(t *testing.T) {
	for _, v := range []string{"", "1", "12345"} {
		a := CreateArgs{SecretEnv: map[string]string{"T": v}}
		if err := a.Validate(); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("create with secret %q: got %v, want invalid_request", v, err)
		}
		r := ResumeArgs{SecretEnv: map[string]string{"T": v}}
		if err := r.Validate(); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("resume with secret %q: got %v, want invalid_request", v, err)
		}
	}
	a := CreateArgs{SecretEnv: map[string]string{"T": "123456"}}
	if err := a.Validate(); err != nil {
		t.Errorf("a %d-byte secret: %v", MinSecretBytes, err)
	}
}

// TestEncodeOutputSize: output that JSON would escape to more than base64
// (NUL bytes, control characters) travels as base64, so an encoded reply
// is never more than 4/3 of its output; text stays text; both come back.
func TestEncodeOutputSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // encoding
	}{
		{"hello\nworld\t\"quoted\"\n", ""},
		{strings.Repeat("\x00", 300), "base64"},
		{strings.Repeat("<", 100000), "base64"},
		{strings.Repeat("\x1b[0m<b>", 40), "base64"},
		{"a < b && c > d\n", ""},
		{"\xff\xfe", "base64"},
	} {
		text, enc := EncodeOutput([]byte(tc.in))
		if enc != tc.want {
			t.Errorf("%q: encoding %q, want %q", tc.in[:min(len(tc.in), 20)], enc, tc.want)
		}
		b, err := json.Marshal(text)
		if err != nil || len(b) > 2+MaxEscapedLen(len(tc.in)) {
			t.Errorf("%q: encodes to %d bytes (%v), more than the bound", tc.in[:min(len(tc.in), 20)], len(b), err)
		}
		back, err := DecodeOutput(text, enc)
		if err != nil || string(back) != tc.in {
			t.Errorf("%q: round trip %q, %v", tc.in[:min(len(tc.in), 20)], back, err)
		}
	}
}
