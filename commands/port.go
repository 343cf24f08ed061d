package commands

import "github.com/paddock-dev/paddock/errcode"

// OpPort (1.3) resolves an exposed port of a session to an address a
// client on the node's network reaches.
const OpPort Op = "port"

// MaxExposedPorts bounds CreateArgs.ExposedPorts.
const MaxExposedPorts = 16

// PortArgs are the args of port.
type PortArgs struct {
	// Port is the port inside the sandbox; the create must have exposed it.
	Port int `json:"port"`
}

// Validate checks the port's range.
func (a *PortArgs) Validate() error {
	return checkPort("port", a.Port)
}

// PortResult is where a client reaches a session's exposed port: a TCP
// address on the node that serves the session, forwarded to the port
// inside the sandbox. It holds while the sandbox runs on that node: a stop,
// shutdown or delete closes it, and after a resume (on this node or
// another) port returns the new address.
type PortResult struct {
	// Host and Port are the address to connect to.
	Host string `json:"host"`
	Port int    `json:"port"`
	// SandboxPort is the port inside the sandbox it reaches.
	SandboxPort int `json:"sandbox_port"`
	// Node is the node that serves it.
	Node string `json:"node"`
}

// checkPort checks a TCP port number.
func checkPort(field string, p int) error {
	if p < 1 || p > 65535 {
		return errcode.New(errcode.InvalidRequest, "%s %d is outside 1..65535", field, p)
	}
	return nil
}

// checkExposedPorts checks a create's exposed ports: at most
// MaxExposedPorts, each in range, none twice.
func checkExposedPorts(ports []int) error {
	if len(ports) > MaxExposedPorts {
		return errcode.New(errcode.InvalidRequest, "more than %d exposed ports", MaxExposedPorts)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if err := checkPort("exposed port", p); err != nil {
			return err
		}
		if seen[p] {
			return errcode.New(errcode.InvalidRequest, "exposed port %d is given twice", p)
		}
		seen[p] = true
	}
	return nil
}
