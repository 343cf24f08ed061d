//go:build !linux

package docker

import (
	"context"
	"net"

	"github.com/paddock-dev/paddock/errcode"
)

// DialPort needs Linux network namespaces.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return nil, errcode.New(errcode.InvalidState, "forwarding a port into a container needs Linux")
}

// ListenEgress needs Linux network namespaces.
func (s *Sandbox) ListenEgress(ctx context.Context, port int) (net.Listener, error) {
	return nil, errcode.New(errcode.PolicyDenied, "an egress allow list needs Linux")
}

// EnforcesEgress is false off Linux.
func (r *Runtime) EnforcesEgress() bool { return false }
