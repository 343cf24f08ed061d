package main

import (
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/testenv"
)

// TestCLIDisk: sandbox create --disk asks a disk; a size over the node's
// --max-disk is policy_denied, and a bad size is a usage error (exit 2).
func TestCLIDisk(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{Policy: nodes.Policy{MaxDiskBytes: 1 << 30}}})
	url := st.Broker.ClientURL()
	for _, bad := range []string{"0", "lots", "-1g", "1k"} {
		if code, _, errs := cli(t, url, "", "sandbox", "create", "--disk", bad); code != 2 || errs == "" {
			t.Errorf("create --disk %s: exit %d, %q; want a usage error", bad, code, errs)
		}
	}
	if code, _, errs := cli(t, url, "", "sandbox", "create", "--disk", "2g"); code == 0 || !strings.Contains(errs, "policy_denied") {
		t.Errorf("create --disk 2g on a 1 GiB node: exit %d, %q; want policy_denied", code, errs)
	}
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create", "--disk", "512m"))
	defer cli(t, url, "", "sandbox", "delete", id)
	evs, err := st.Log.Session(t.Context(), "default", id)
	if err != nil || len(evs) < 1 || !strings.Contains(string(evs[0].Data), `"disk_bytes":536870912`) {
		t.Fatalf("the create's start event does not record the disk asked: %+v", evs)
	}
}
