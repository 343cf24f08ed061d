// Package listenaddr checks the addresses Paddock's HTTP servers (the
// metrics, the console, MCP over HTTP) are told to listen on: loopback
// unless the operator says otherwise, since what they serve is in clear.
package listenaddr

import (
	"net"
	"strconv"

	"github.com/paddock-dev/paddock/errcode"
)

// Check checks addr, the value of the flag named flag: HOST:PORT with a
// port number from 0 to 65535 and a host that is an IP address,
// localhost, or empty (every interface). A host that is not loopback is
// refused unless allowRemote; why ends that refusal, saying what would
// be exposed and how to allow it. Every refusal is invalid_request.
func Check(flag, addr string, allowRemote bool, why string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errcode.New(errcode.InvalidRequest, "%s %q: want host:port, such as 127.0.0.1:8080 (%v)", flag, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return errcode.New(errcode.InvalidRequest, "%s %q: the port must be a number from 0 to 65535", flag, addr)
	}
	loopback := host == "localhost"
	if !loopback && host != "" {
		ip := net.ParseIP(host)
		if ip == nil {
			return errcode.New(errcode.InvalidRequest, "%s %q: the host must be an IP address or localhost", flag, addr)
		}
		loopback = ip.IsLoopback()
	}
	if !loopback && !allowRemote {
		return errcode.New(errcode.InvalidRequest, "%s %q is not a loopback address: %s", flag, addr, why)
	}
	return nil
}
