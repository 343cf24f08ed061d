package commands

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/errcode"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ContractVersion
		ok   bool
	}{
		{"", ContractVersion{1, 0}, true},
		{"1.0", ContractVersion{1, 0}, true},
		{"1.12", ContractVersion{1, 12}, true},
		{"2.0", ContractVersion{2, 0}, true},
		{"1", ContractVersion{}, false},
		{"1.0.0", ContractVersion{}, false},
		{"v1.0", ContractVersion{}, false},
		{"1.-1", ContractVersion{}, false},
		{"1.99999", ContractVersion{}, false},
		{" 1.0", ContractVersion{}, false},
	} {
		got, err := ParseVersion(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestVersionRule: an unknown major is unsupported_version; a request of
// a newer minor may carry fields this server does not know (ignored); a
// request of this minor or an older one may not (a typo must not pass).
func TestVersionRule(t *testing.T) {
	newer := ContractVersion{ContractMajor, ContractMinor + 1}.String()
	for _, tc := range []struct {
		name, body string
		code       errcode.Code
	}{
		{"no version", `{"args":{"argv":["true"]}}`, ""},
		{"this version", `{"version":"` + Version + `","args":{"argv":["true"]}}`, ""},
		{"next major", `{"version":"2.0","args":{"argv":["true"]}}`, errcode.UnsupportedVersion},
		{"major 0", `{"version":"0.9","args":{"argv":["true"]}}`, errcode.UnsupportedVersion},
		{"malformed", `{"version":"one","args":{"argv":["true"]}}`, errcode.InvalidRequest},
		{"unknown arg, this minor", `{"version":"` + Version + `","args":{"argv":["true"],"timout_ms":5}}`, errcode.InvalidRequest},
		{"unknown envelope field, this minor", `{"version":"` + Version + `","priority":3,"args":{"argv":["true"]}}`, errcode.InvalidRequest},
		{"unknown arg, newer minor", `{"version":"` + newer + `","args":{"argv":["true"],"priority":3}}`, ""},
		{"unknown envelope field, newer minor", `{"version":"` + newer + `","priority":3,"args":{"argv":["true"]}}`, ""},
		{"newer minor still checks types", `{"version":"` + newer + `","args":{"argv":"true"}}`, errcode.InvalidRequest},
		{"newer minor still refuses duplicates", `{"version":"` + newer + `","args":{"argv":["a"],"argv":["b"]}}`, errcode.InvalidRequest},
	} {
		var args ExecArgs
		_, err := DecodeRequest([]byte(tc.body), &args)
		if errcode.Of(err) != tc.code {
			t.Errorf("%s: got %v, want code %q", tc.name, err, tc.code)
		}
		if tc.code == "" && (len(args.Argv) != 1 || args.Argv[0] != "true") {
			t.Errorf("%s: args = %+v, want argv [true]", tc.name, args)
		}
	}
}

// TestMinorInterop plays both sides of a minor version step with a field
// that the next minor would add (here "priority" on exec): a newer client's
// request reaches an older server, which ignores the field it does not
// know; an older client's request reaches a newer server, which decodes
// it with the field at its zero value, the behaviour of the older minor.
func TestMinorInterop(t *testing.T) {
	type execArgsMinor1 struct {
		ExecArgs
		Priority int `json:"priority,omitempty"`
	}
	newClient, _ := json.Marshal(Request{Version: ContractVersion{ContractMajor, ContractMinor + 1}.String(),
		Args: mustMarshal(t, execArgsMinor1{ExecArgs: ExecArgs{Argv: []string{"true"}}, Priority: 3})})
	var old ExecArgs
	if _, err := DecodeRequest(newClient, &old); err != nil || len(old.Argv) != 1 {
		t.Fatalf("older server, newer client: %v (args %+v); want the request served without the new field", err, old)
	}
	oldClient, _ := json.Marshal(Request{Version: Version, Args: mustMarshal(t, ExecArgs{Argv: []string{"true"}})})
	var newer execArgsMinor1
	if _, err := DecodeRequest(oldClient, &newer); err != nil || newer.Priority != 0 || len(newer.Argv) != 1 {
		t.Fatalf("newer server, older client: %v (args %+v); want the request with priority 0", err, newer)
	}
}

func mustMarshal(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeHostile: inputs a hostile client sends get invalid_request
// (or payload_too_large), with a message that says where, never a panic.
func TestDecodeHostile(t *testing.T) {
	for _, tc := range []struct {
		name, body, mention string
	}{
		{"duplicate top-level key", `{"command_id":"a","command_id":"b"}`, "duplicate"},
		{"duplicate nested key", `{"args":{"argv":["x"],"argv":["y"]}}`, "/args/argv"},
		{"invalid UTF-8", "{\"args\":{\"argv\":[\"\xff\"]}}", "UTF-8"},
		{"case-folded name", `{"args":{"Argv":["x"]}}`, "/args/Argv"},
		{"timeout overflow", `{"args":{"argv":["x"],"timeout_ms":9223372036854775808}}`, "/args/timeout_ms"},
		{"timeout as float", `{"args":{"argv":["x"],"timeout_ms":1.5}}`, "/args/timeout_ms"},
		{"wrong type", `{"args":{"argv":"x"}}`, "/args/argv"},
		{"trailing data", `{} {}`, "malformed"},
		{"not an object", `[]`, ""},
		{"control char in actor", `{"actor":"a\nb"}`, "actor"},
		{"long trace id", `{"trace_id":"` + strings.Repeat("x", MaxTraceLen+1) + `"}`, "trace_id"},
		{"bad command id", `{"command_id":"a.b"}`, "command_id"},
	} {
		var args ExecArgs
		_, err := DecodeRequest([]byte(tc.body), &args)
		if !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("%s: got %v, want invalid_request", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: message %q does not mention %q", tc.name, err, tc.mention)
		}
	}
}

// TestTimeoutBounds: the huge timeouts that once overflowed a Duration
// into a negative (no timeout) or zero (killed at once) are refused.
func TestTimeoutBounds(t *testing.T) {
	for _, ms := range []int64{9223372036855, 18446744073710 / 2, MaxTimeout.Milliseconds() + 1, -1} {
		a := ExecArgs{Argv: []string{"true"}, TimeoutMS: ms}
		if err := a.Validate(); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("timeout_ms %d: got %v, want invalid_request", ms, err)
		}
	}
	a := ExecArgs{Argv: []string{"true"}, TimeoutMS: MaxTimeout.Milliseconds()}
	if err := a.Validate(); err != nil {
		t.Errorf("timeout_ms at the bound: %v", err)
	}
	var args ExecArgs
	if _, err := DecodeRequest([]byte(`{"args":{"argv":["x"],"timeout_ms":18446744073710}}`), &args); err == nil {
		if err := args.Validate(); err == nil {
			t.Error("timeout_ms 18446744073710 passes decode and validation")
		}
	}
}

func TestOutputEncoding(t *testing.T) {
	for _, in := range [][]byte{nil, []byte("hello\n"), []byte("héllo ✓"), {0xff, 0x00, 'a'}, []byte("a\x00b")} {
		text, enc := EncodeOutput(in)
		if (enc == "") != (string(in) == text) {
			t.Errorf("EncodeOutput(%q) = %q, %q: text only when valid UTF-8", in, text, enc)
		}
		back, err := DecodeOutput(text, enc)
		if err != nil || string(back) != string(in) {
			t.Errorf("round trip of %q = %q, %v", in, back, err)
		}
	}
	if _, err := DecodeOutput("x", "rot13"); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Errorf("unknown encoding: got %v, want invalid_request", err)
	}
}

func TestCutUTF8(t *testing.T) {
	s := []byte("ab✓cd") // ✓ is 3 bytes at 2..4
	for n, want := range map[int]string{0: "", 1: "a", 2: "ab", 3: "ab", 4: "ab", 5: "ab✓", 6: "ab✓c", 7: "ab✓cd", 9: "ab✓cd"} {
		if got := string(CutUTF8(s, n)); got != want {
			t.Errorf("CutUTF8(%q, %d) = %q, want %q", s, n, got, want)
		}
	}
	bin := []byte{0xff, 0xfe, 0xfd}
	if got := CutUTF8(bin, 2); len(got) != 2 {
		t.Errorf("binary cut = %x, want the first 2 bytes", got)
	}
}

func TestSessionIDFor(t *testing.T) {
	a, b := SessionIDFor("acme", "cmd-1"), SessionIDFor("acme", "cmd-1")
	if a != b || CheckToken("session_id", a) != nil {
		t.Fatalf("SessionIDFor = %q, %q; want equal valid tokens", a, b)
	}
	if SessionIDFor("other", "cmd-1") == a || SessionIDFor("acme", "cmd-2") == a {
		t.Fatal("SessionIDFor is not distinct across tenants or command ids")
	}
}

func TestReplyBound(t *testing.T) {
	if _, err := ResultReply(ReadResult{Content: make([]byte, InlineLimit)}); err != nil {
		t.Fatalf("a full inline read does not fit a reply: %v", err)
	}
	if _, err := ResultReply(ReadResult{Content: make([]byte, 800<<10)}); !errors.Is(err, errcode.ErrPayloadTooLarge) {
		t.Fatalf("an oversized result: got %v, want payload_too_large", err)
	}
	big := LsResult{}
	for i := 0; i < MaxLsLimit; i++ {
		big.Entries = append(big.Entries, Entry{Name: strings.Repeat("n", 255), Type: "file"})
	}
	if _, err := ResultReply(big); err != nil {
		t.Fatalf("a page of %d entries with 255-byte names does not fit a reply: %v", MaxLsLimit, err)
	}
}
