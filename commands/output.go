package commands

import (
	"bytes"
	"encoding/base64"
	"unicode/utf8"

	"github.com/paddock-dev/paddock/errcode"
)

// OutputBase64 is the encoding named when output bytes are not valid
// UTF-8.
const OutputBase64 = "base64"

// EncodeOutput applies the output encoding rule, the same in replies and in
// events: bytes that are valid UTF-8 travel as the text itself with no
// encoding named (what a person or the OpenAI Agents SDK's audit events
// expect in "stdout"), unless JSON's escapes would make that text more
// than MaxEscapedLen (output full of control characters, such as NUL
// bytes, is six times its size escaped); those, and any other bytes,
// travel as standard base64 with encoding "base64". Either way the bytes
// come back exactly (DecodeOutput), and the encoded size is bounded: a
// reply that holds capped output fits.
func EncodeOutput(b []byte) (text, encoding string) {
	if utf8.Valid(b) && escapedLen(b) <= MaxEscapedLen(len(b)) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), OutputBase64
}

// MaxEscapedLen is the most n bytes of output may take as escaped JSON
// text: half as much again, and a little more so that short output with a
// few quotes or angle brackets stays readable.
func MaxEscapedLen(n int) int { return n + n/2 + 256 }

// escapedLen is the length of b as a JSON string's content, as
// encoding/json writes it (HTML-safe: <, > and & escaped too).
func escapedLen(b []byte) int {
	n := 0
	for _, c := range b {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		default:
			n++
		}
	}
	return n + 3*bytes.Count(b, []byte("\u2028")) + 3*bytes.Count(b, []byte("\u2029"))
}

// DecodeOutput reverses EncodeOutput. An encoding other than "" and
// "base64", or malformed base64, is invalid_request.
func DecodeOutput(text, encoding string) ([]byte, error) {
	switch encoding {
	case "":
		return []byte(text), nil
	case OutputBase64:
		b, err := base64.StdEncoding.DecodeString(text)
		if err != nil {
			return nil, errcode.New(errcode.InvalidRequest, "output is not valid base64")
		}
		return b, nil
	}
	return nil, errcode.New(errcode.InvalidRequest, "unknown output encoding %q", clip(encoding, 16))
}

// CutUTF8 returns the first n bytes of b, or fewer: a cut at n that would
// split a multi-byte UTF-8 sequence cuts before that sequence instead, so
// valid text stays valid text.
func CutUTF8(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	cut := b[:n]
	for i := 1; i < utf8.UTFMax && i <= len(cut); i++ {
		if c := cut[len(cut)-i]; c&0xC0 != 0x80 { // the last sequence's first byte
			if !utf8.FullRune(cut[len(cut)-i:]) {
				return cut[:len(cut)-i]
			}
			break
		}
	}
	return cut
}
