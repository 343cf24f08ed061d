// Command paddock-supervisor is the in-sandbox supervisor: a static
// binary that a Docker node bind-mounts read-only into every sandbox it
// makes and starts beside the container's keep-alive, as the sandbox's
// user with no privileges. It dials the node's unix socket (bind-mounted
// read-only from a directory of the node's, one per sandbox), says hello,
// and serves exec, processes and file operations on the workspace until
// the node hangs up; then it dials again. See package supervisor.
//
//	paddock-supervisor -socket /.paddock/run/node.sock -root /workspace
//
// Build it static (the sandbox image need not have a libc):
//
//	CGO_ENABLED=0 go build -o paddock-supervisor ./cmd/paddock-supervisor
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/nodes/runtime/supervisor"
)

// version and commit are set by a release build (scripts/release.sh,
// -ldflags -X main.version=... -X main.commit=...); -version prints them.
var version, commit = "devel", ""

func main() {
	socket := flag.String("socket", "/.paddock/run/node.sock", "the node's unix socket")
	root := flag.String("root", "/workspace", "the workspace root")
	showVersion := flag.Bool("version", false, "print the version and commit, and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(strings.TrimSpace("paddock-supervisor " + version + " " + commit))
		return
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	srv, err := supervisor.NewServer(local.OpenConfig{Dir: *root, Env: env, DefaultTimeout: 365 * 24 * time.Hour})
	if err != nil {
		fmt.Fprintln(os.Stderr, "paddock-supervisor:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	_ = srv.Run(ctx, *socket)
}
