// Package deploy holds no code: it is the deployment files (systemd units,
// Prometheus alert rules, the Grafana dashboard) and the tests that hold
// them to their promises. The tests run the tools an operator would:
// systemd-analyze rates the units' sandboxing, promtool checks and
// unit-tests the alert rules. Without CI set they skip when a tool is
// missing; with CI=true they fail (.ci/run installs both).
package deploy
