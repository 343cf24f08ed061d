package docker_test

import (
	"testing"

	"github.com/paddock-dev/paddock/testenv"
)

// TestSupervisorDeniedFallsBack: a file operation the sandbox's user may
// not do (a directory without permissions) is done through the Docker
// API, with the daemon's rights, as file operations always were on this
// runtime; the supervisor stays connected.
func TestSupervisorDeniedFallsBack(t *testing.T) {
	rt := supervisedRuntime(t)
	sb := create(t, rt, spec(rt, testenv.SandboxBaseImage(t)))
	sh(t, sb, "mkdir d && echo hi > d/f && chmod 0 d")
	if got, _, err := sb.ReadFile(t.Context(), "d/f", 100); err != nil || string(got) != "hi\n" {
		t.Errorf("ReadFile d/f: got %q, %v", got, err)
	}
	big := make([]byte, 600<<10) // more than the window: the replay must hold what was sent
	for i := range big {
		big[i] = byte(i)
	}
	if err := sb.WriteFile(t.Context(), "d/g", big, 0o644); err != nil {
		t.Errorf("WriteFile d/g: %v", err)
	}
	if got, _, err := sb.ReadFile(t.Context(), "d/g", 1<<20); err != nil || string(got) != string(big) {
		t.Errorf("ReadFile d/g: got %d bytes, %v; want the %d written", len(got), err, len(big))
	}
	entries, err := sb.List(t.Context(), "d")
	if err != nil || len(entries) != 2 || entries[0].Name != "f" || entries[1].Name != "g" {
		t.Errorf("List d: got %+v, %v", entries, err)
	}
	if err := sb.Mkdir(t.Context(), "d/sub", false); err != nil {
		t.Errorf("Mkdir d/sub: %v", err)
	}
	if st := sb.Supervisor(); !st.Connected || st.Violations != 0 {
		t.Errorf("after the refusals: %+v; want the supervisor connected, no violations", st)
	}
	sh(t, sb, "chmod 755 d")
}
