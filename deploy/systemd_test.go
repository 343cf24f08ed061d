package deploy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// exposureRE is the last line of systemd-analyze security: "→ Overall
// exposure level for UNIT: 1.1 OK 🙂".
var exposureRE = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) ([A-Z]+)`)

// rate runs `systemd-analyze security --offline=yes` on a unit file and
// returns its exposure (0 best, 10 worst) and rating word.
func rate(t *testing.T, analyze, unit string) (float64, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// systemd-analyze exits non-zero when the exposure is over
	// --threshold (100 = 10.0: never); the rating is read from its output.
	out, err := exec.CommandContext(ctx, analyze, "security", "--offline=yes", "--threshold=100", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security %s: %v\n%s", unit, err, out)
	}
	m := exposureRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security %s: no overall exposure in its output:\n%s", unit, out)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatalf("exposure %q: %v", m[1], err)
	}
	return v, string(m[2])
}

// TestSystemdSecurity: systemd-analyze rates the NATS server's and the
// engine's units OK or better (exposure under 2.0 here: 1.1 when written),
// and the same check rates a unit without the sandboxing UNSAFE, so a
// unit that loses its hardening fails.
func TestSystemdSecurity(t *testing.T) {
	analyze := tool(t, "systemd-analyze", "systemd")
	for _, unit := range []string{"paddock-nats@.service", "paddock-engine.service"} {
		t.Run(unit, func(t *testing.T) {
			v, word := rate(t, analyze, filepath.Join("systemd", unit))
			if word != "OK" && word != "SAFE" && word != "PERFECT" {
				t.Errorf("%s: exposure %.1f %s, want OK or better", unit, v, word)
			}
			if v >= 2.0 {
				t.Errorf("%s: exposure %.1f, want under 2.0 (its hardening lost some of its settings?)", unit, v)
			}
		})
	}
	// The attack: the engine's unit without its [Service] hardening.
	bare := filepath.Join(t.TempDir(), "paddock-bare.service")
	unit := "[Unit]\nDescription=bare\n\n[Service]\nUser=paddock\nExecStart=/usr/local/bin/engine serve\n\n[Install]\nWantedBy=multi-user.target\n"
	if err := os.WriteFile(bare, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, word := rate(t, analyze, bare); word != "UNSAFE" && word != "EXPOSED" {
		t.Errorf("a unit without sandboxing: exposure %.1f %s, want UNSAFE or EXPOSED", v, word)
	}
}
