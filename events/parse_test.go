package events

import "testing"

func TestParse(t *testing.T) {
	s := Subjects{}
	for _, tc := range []struct {
		subject string
		want    Ref
		ok      bool
	}{
		{"sbx.evt.acme.s1.exec.start", Ref{Tenant: "acme", Session: "s1", Op: "exec", Phase: PhaseStart}, true},
		{"sbx.nodeevt.n1.registered", Ref{Node: "n1", Kind: "registered"}, true},
		{"sbx.evt.acme.s1.exec", Ref{}, false},
		{"sbx.evt.acme..exec.start", Ref{}, false},
		{"sbx.evt.nonsense", Ref{}, false},
		{"sbx.nodeevt.n1.a.b", Ref{}, false},
		{"other.evt.acme.s1.exec.start", Ref{}, false},
		{"sbx", Ref{}, false},
	} {
		got, ok := s.Parse(tc.subject)
		if ok != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, %v", tc.subject, got, ok, tc.want, tc.ok)
		}
	}
	if ref, ok := (Subjects{Prefix: "p"}).Parse(Subjects{Prefix: "p"}.Session("t", "s", "ls", PhaseFinish)); !ok || ref.Session != "s" {
		t.Errorf("a custom prefix does not round-trip: %+v, %v", ref, ok)
	}
}
