package nodes

import (
	"bytes"
	"encoding/json"

	"github.com/paddock-dev/paddock/commands"
)

// redactor replaces secret values wherever they might appear.
type redactor struct {
	secrets [][]byte
	json    [][]byte // each secret as it appears inside a JSON string
	longest int      // the longest secret's length in bytes
}

const redacted = "[REDACTED]"

func newRedactor(secretEnv map[string]string) redactor {
	var r redactor
	for _, k := range sortedKeys(secretEnv) {
		v := secretEnv[k]
		if v == "" {
			continue
		}
		r.secrets = append(r.secrets, []byte(v))
		q, _ := json.Marshal(v)
		r.json = append(r.json, q[1:len(q)-1])
		r.longest = max(r.longest, len(v))
	}
	return r
}

func (r redactor) bytes(b []byte) []byte {
	for _, s := range r.secrets {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte(redacted))
		}
	}
	return b
}

func (r redactor) string(s string) string {
	if len(r.secrets) == 0 {
		return s
	}
	return string(r.bytes([]byte(s)))
}

func (r redactor) encoded(b []byte) []byte {
	for _, s := range r.json {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte(redacted))
		}
	}
	return b
}

// slack is how many bytes beyond an output cap a runtime must keep so that
// a secret which begins before the cap is whole in what it kept, and can
// be redacted before the cut.
func (r redactor) slack() int {
	if r.longest == 0 {
		return 0
	}
	return r.longest - 1
}

// output redacts kept output and then cuts it to max bytes (never inside a
// UTF-8 sequence), so neither a secret nor a prefix of one survives the
// cut. It reports whether anything was cut.
func (r redactor) output(b []byte, max int) ([]byte, bool) {
	b = r.bytes(b)
	if len(b) <= max {
		return b, false
	}
	return commands.CutUTF8(b, max), true
}
