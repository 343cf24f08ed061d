package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/docker/gvisorsetup"
)

// registerGVisorCmd serves `engine runtime register-gvisor [--daemon-json
// F] [--runsc PATH] [--name N] [--wait D]`: it registers gVisor's runsc
// with the local Docker daemon for agent-node --runtime gvisor (package
// gvisorsetup: daemon.json merged, every other key kept; SIGHUP; waits
// until the daemon lists it). Idempotent; needs root.
func registerGVisorCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runtime register-gvisor", stderr)
	var opts gvisorsetup.Options
	fs.StringVar(&opts.DaemonJSON, "daemon-json", gvisorsetup.DefaultDaemonJSON, "the Docker daemon's configuration file")
	fs.StringVar(&opts.Path, "runsc", gvisorsetup.DefaultPath, "the runsc binary (Debian: apt-get install runsc)")
	fs.StringVar(&opts.Name, "name", docker.GVisorOCIRuntime, "the runtime's name in Docker (agent-node --gvisor-runtime)")
	fs.DurationVar(&opts.Wait, "wait", 30*time.Second, "how long to wait for the daemon to list the runtime")
	jsonOut := fs.Bool("json", false, `print {"file": ..., "changed": ...}`)
	pos, _, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("runtime register-gvisor takes no arguments")
	}
	if opts.Wait <= 0 {
		return usageErr("--wait must be positive")
	}
	res, err := gvisorsetup.Register(ctx, opts)
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(stdout, struct {
			File    string `json:"file"`
			Changed bool   `json:"changed"`
		}{res.File, res.Changed})
	}
	if res.Changed {
		fmt.Fprintf(stdout, "registered %s in %s; dockerd reloaded and lists it\n", opts.Name, res.File)
	} else {
		fmt.Fprintf(stdout, "%s is registered already in %s\n", opts.Name, res.File)
	}
	return nil
}
