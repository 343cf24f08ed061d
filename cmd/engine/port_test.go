package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/testenv"
)

// TestCLIPort: `sandbox create --expose P` and `sandbox port ID P` give an
// address that reaches a server the session runs on P (the local runtime:
// the host's busybox httpd, started as a process of the session); a port
// not exposed is invalid_request; after stop the address is closed.
func TestCLIPort(t *testing.T) {
	busybox, err := os.Stat("/bin/busybox")
	if err != nil || busybox.IsDir() {
		if os.Getenv("CI") == "true" {
			t.Fatal("/bin/busybox is missing (apt-get install busybox-static)")
		}
		t.Skip("no /bin/busybox")
	}
	st := testenv.StartStack(t, testenv.StackOptions{})
	url := st.Broker.ClientURL()
	p := testenv.FreePortRange(t, 1)
	id := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "create", "--runtime", "local", "--expose", strconv.Itoa(p)))
	defer cli(t, url, "", "sandbox", "delete", id)
	mustCLI(t, url, "<p>hi</p>\n", "sandbox", "write", id, "www/index.html")
	mustCLI(t, url, "", "sandbox", "proc", "start", id, "--", "/bin/busybox", "httpd", "-f", "-p", fmt.Sprintf("127.0.0.1:%d", p), "-h", "www")
	addr := strings.TrimSpace(mustCLI(t, url, "", "sandbox", "port", id, strconv.Itoa(p)))
	if !strings.HasPrefix(addr, "127.0.0.1:") || addr == fmt.Sprintf("127.0.0.1:%d", p) {
		t.Fatalf("sandbox port printed %q; want the node's forward on 127.0.0.1", addr)
	}
	c := http.Client{Timeout: 5 * time.Second}
	testenv.Eventually(t, 30*time.Second, func() error {
		res, err := c.Get("http://" + addr + "/index.html")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if string(b) != "<p>hi</p>\n" {
			return fmt.Errorf("GET = %s %q", res.Status, b)
		}
		return nil
	})
	if code, _, errs := cli(t, url, "", "sandbox", "port", id, strconv.Itoa(p+1)); code != 2 || !strings.HasPrefix(errs, "error: invalid_request: port") {
		t.Errorf("port of a port not exposed: exit %d, %q", code, errs)
	}
	mustCLI(t, url, "", "sandbox", "stop", id)
	if res, err := c.Get("http://" + addr + "/index.html"); err == nil {
		res.Body.Close()
		t.Errorf("%s still answers after stop: %s", addr, res.Status)
	}
}
