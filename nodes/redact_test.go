package nodes

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
)

// FuzzRedact: whatever the secrets and the output, no secret survives in
// redacted output or event data, the cut output never ends in a prefix of
// a secret, and redacted data is still JSON of the same shape.
func FuzzRedact(f *testing.F) {
	f.Add("hunter2", "s3cr3t-xyz", []byte("token=hunter2 and s3cr3t-xyz"), 12)
	f.Add("123456", "stdout_bytes", []byte("123456 stdout_bytes 1234567"), 5)
	f.Add("aaaaaa", "aaaaaaa", []byte("aaaaaaaaaaaaaaaa"), 9)
	f.Fuzz(func(t *testing.T, s1, s2 string, out []byte, max int) {
		if len(s1) < commands.MinSecretBytes || len(s2) < commands.MinSecretBytes || max < 0 || max > 1<<16 {
			return
		}
		// A secret that reaches across the edge of the marker could be
		// spelt by a marker and its neighbour rather than leaked; such a
		// secret has a bracket in it.
		if strings.ContainsAny(s1+s2, "[]") {
			return
		}
		r := newRedactor(map[string]string{"A": s1, "B": s2})
		full := r.bytes(out)
		for _, s := range []string{s1, s2} {
			if bytes.Contains(full, []byte(s)) && !strings.Contains(redacted, s) {
				t.Fatalf("%q survives in %q", s, full)
			}
		}
		// Cut as exec does: the runtime keeps max+slack bytes.
		kept := out
		if len(kept) > max+r.slack() {
			kept = kept[:max+r.slack()]
		}
		cut, _ := r.output(kept, max)
		if len(cut) > max {
			t.Fatalf("output of %d bytes over the cap %d", len(cut), max)
		}
		for _, s := range []string{s1, s2} {
			if strings.Contains(redacted, s) {
				continue
			}
			if bytes.Contains(cut, []byte(s)) {
				t.Fatalf("%q survives the cut in %q", s, cut)
			}
		}
		d := events.ExecStart{Argv: []string{string(out), s1}, Cwd: s2, TimeoutMS: 123456, EnvKeys: []string{"stdout_bytes"}}
		b, _ := json.Marshal(d)
		rb, err := r.data(b)
		if err != nil {
			t.Fatalf("redacted data does not encode: %v", err)
		}
		var back events.ExecStart
		if err := json.Unmarshal(rb, &back); err != nil {
			t.Fatalf("redacted data %s does not decode: %v", rb, err)
		}
		if back.TimeoutMS != 123456 || len(back.Argv) != 2 || len(back.EnvKeys) != 1 {
			t.Fatalf("redaction changed more than strings: %+v", back)
		}
	})
}
