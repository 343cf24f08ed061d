package nodes

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

// redactor replaces secret values wherever they might appear. It works on
// values (strings of an event's fields and data, output bytes), never on
// encoded JSON: a secret that happens to spell a JSON key, a number or a
// bit of syntax must not garble a stored event.
type redactor struct {
	secrets [][]byte
	longest int // the longest secret's length in bytes
}

const redacted = "[REDACTED]"

func newRedactor(secretEnv map[string]string) redactor {
	return redactor{}.with(secretEnv)
}

// with returns a redactor of r's secrets and the values of more.
func (r redactor) with(more map[string]string) redactor {
	out := redactor{secrets: append([][]byte(nil), r.secrets...), longest: r.longest}
	for _, k := range sortedKeys(more) {
		v := more[k]
		if v == "" || out.has(v) {
			continue
		}
		out.secrets = append(out.secrets, []byte(v))
		out.longest = max(out.longest, len(v))
	}
	// Longest first: a secret that holds another must go whole.
	slices.SortStableFunc(out.secrets, func(a, b []byte) int { return len(b) - len(a) })
	return out
}

func (r redactor) has(v string) bool {
	for _, s := range r.secrets {
		if string(s) == v {
			return true
		}
	}
	return false
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

// strings returns ss with secret values redacted (argv as recorded).
func (r redactor) strings(ss []string) []string {
	out := make([]string, len(ss))
	for i, v := range ss {
		out[i] = r.string(v)
	}
	return out
}

// active reports whether there is anything to redact.
func (r redactor) active() bool { return len(r.secrets) > 0 }

// data redacts every string value in an event's encoded data (not its
// member names, numbers or syntax) and encodes it again. Numbers keep
// their exact text.
func (r redactor) data(b json.RawMessage) (json.RawMessage, error) {
	if !r.active() || len(b) == 0 {
		return b, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(r.value(v))
}

// value redacts the strings in a decoded JSON value.
func (r redactor) value(v any) any {
	switch x := v.(type) {
	case string:
		return r.string(x)
	case []any:
		for i := range x {
			x[i] = r.value(x[i])
		}
	case map[string]any:
		for k, e := range x {
			x[k] = r.value(e)
		}
	}
	return v
}

// event redacts the free-text fields of an event (its data is redacted
// when it is encoded; ids and tokens are not free text).
func (r redactor) event(ev *events.Event) {
	if !r.active() {
		return
	}
	ev.Actor = r.string(ev.Actor)
	ev.TraceID = r.string(ev.TraceID)
	ev.ParentSpanID = r.string(ev.ParentSpanID)
	ev.ErrorMessage = r.string(ev.ErrorMessage)
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
