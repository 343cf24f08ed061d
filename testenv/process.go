package testenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// BuildBinary builds a main package (an import path, or a module-relative
// path such as "./cmd/agent-node" resolved from the module root) into the
// test's temporary directory and returns the binary's path. The Go build
// cache makes repeated builds cheap.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), path.Base(strings.TrimSuffix(pkg, "/v2")))
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool(), "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func goTool() string {
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return "go"
}

func moduleRoot() (string, error) {
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a module")
	}
	return filepath.Dir(mod), nil
}

var listenRE = regexp.MustCompile(`Listening for client connections on (\S+:\d+)`)

// StartNATSProcess starts a separate nats-server process (built from the
// module's nats-server dependency) with JetStream on disk, listening on a
// free 127.0.0.1 port, and returns its URL. The process is stopped when the
// test ends. Extra arguments go to nats-server: with "-c", "file.conf" the
// config sets up JetStream, and the listener flags override its listener.
func StartNATSProcess(t testing.TB, extra ...string) string {
	t.Helper()
	bin := BuildBinary(t, "github.com/nats-io/nats-server/v2")
	args := []string{"-a", "127.0.0.1", "-p", "-1"}
	if !slices.Contains(extra, "-c") {
		args = append(args, "-js", "-sd", t.TempDir())
	}
	cmd := exec.Command(bin, append(args, extra...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	urls := make(chan string, 1)
	go func() { // owned by the cleanup above, which waits for it
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- "nats://" + m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case u := <-urls:
		return u
	case <-ctx.Done():
		t.Fatal("nats-server did not report its listener within 30s")
		return ""
	}
}
