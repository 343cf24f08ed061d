package deploy_test

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestAlertRules: promtool accepts alerts.yaml (syntax, PromQL,
// templates) and its unit tests (alerts_test.yaml) pass: a disk under
// 10% free, a lost node and a failing readiness check each fire their
// alert, with the labels and text an operator gets, and not before their
// `for`.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, promtool, args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
