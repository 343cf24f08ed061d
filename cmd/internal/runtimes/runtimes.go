// Package runtimes opens the runtimes a node agent serves, as the
// --runtime flag of agent-node and engine serve selects them:
//
//	auto    Docker when its daemon answers, else local
//	docker  Docker; an error when its daemon does not answer
//	local   the local process runtime (no security boundary)
//
// auto never offers local beside Docker: on a host with Docker, untrusted
// code must not be able to ask for the unconfined runtime.
package runtimes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
)

// Modes lists the values of the --runtime flag.
const Modes = "auto, docker or local"

// Options selects and configures the runtimes.
type Options struct {
	// Mode is auto, docker or local.
	Mode string
	// Node is the node's id; Docker labels its containers with it.
	Node string
	// LocalDir holds the local runtime's sandboxes.
	LocalDir string
	// PingTimeout bounds the Docker daemon check (default 3s).
	PingTimeout time.Duration
}

// Check validates the mode without opening anything.
func Check(mode string) error {
	switch mode {
	case "auto", "docker", "local":
		return nil
	}
	return fmt.Errorf("--runtime %q is not one of %s", mode, Modes)
}

// Open opens the runtimes opts selects, in preference order, and a func
// that releases them.
func Open(ctx context.Context, opts Options, logger *slog.Logger) ([]runtime.Runtime, func() error, error) {
	if err := Check(opts.Mode); err != nil {
		return nil, nil, err
	}
	if opts.PingTimeout == 0 {
		opts.PingTimeout = 3 * time.Second
	}
	if opts.Mode != "local" {
		rt, err := openDocker(ctx, opts)
		if err == nil {
			return []runtime.Runtime{rt}, rt.Close, nil
		}
		if opts.Mode == "docker" {
			return nil, nil, err
		}
		logger.Warn("Docker is not reachable; using the local runtime, which is no security boundary", "err", err)
	}
	rt, err := local.New(local.Config{Dir: opts.LocalDir})
	if err != nil {
		return nil, nil, err
	}
	return []runtime.Runtime{rt}, func() error { return nil }, nil
}

func openDocker(ctx context.Context, opts Options) (*docker.Runtime, error) {
	rt, err := docker.New(docker.Config{Node: opts.Node})
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, opts.PingTimeout)
	defer cancel()
	if err := rt.Ping(pctx); err != nil {
		return nil, errors.Join(fmt.Errorf("docker daemon does not answer: %w", err), rt.Close())
	}
	return rt, nil
}
