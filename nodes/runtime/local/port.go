package local

import (
	"context"
	"net"
	"strconv"
)

// DialPort dials port on the host's loopback: a local sandbox's processes
// share the host's network (the local runtime isolates nothing), so a
// port they listen on is the host's.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}
