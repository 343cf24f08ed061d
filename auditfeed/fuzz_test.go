package auditfeed_test

import (
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/auditfeed"
)

// match reports whether the literal subject subj matches pattern.
func match(subj, pattern string) bool {
	s, p := strings.Split(subj, "."), strings.Split(pattern, ".")
	for i, pt := range p {
		if pt == ">" {
			return len(s) > i
		}
		if i >= len(s) || (pt != "*" && pt != s[i]) {
			return false
		}
	}
	return len(s) == len(p)
}

// FuzzWithin: a filter Within a pattern lets no subject through that the
// pattern would not: every literal subject the filter matches, the
// pattern matches too.
func FuzzWithin(f *testing.F) {
	for _, c := range [][3]string{
		{"sbx.evt.acme.>", "sbx.evt.acme.>", "sbx.evt.acme.s1.exec.start"},
		{"sbx.evt.*.>", "sbx.evt.acme.>", "sbx.evt.evil.s1.exec.start"},
		{"sbx.evt.acme.*.*.*", "sbx.evt.acme.>", "sbx.evt.acme.s.o.p"},
		{">", "sbx.nodeevt.>", "sbx.node.n1.cordon"},
	} {
		f.Add(c[0], c[1], c[2])
	}
	f.Fuzz(func(t *testing.T, filter, pattern, subj string) {
		for _, tok := range strings.Split(subj, ".") {
			if tok == "" || tok == "*" || tok == ">" {
				return // not a literal subject
			}
		}
		if auditfeed.Within(filter, pattern) && match(subj, filter) && !match(subj, pattern) {
			t.Fatalf("Within(%q, %q), but %q matches the filter and not the pattern", filter, pattern, subj)
		}
	})
}
