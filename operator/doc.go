// Package operator is what an operator of a Paddock deployment does
// beside the tenants' commands, as a library: list the nodes (from their
// heartbeats and the nodes projection), cordon or uncordon one, and drain
// one (move its sessions to other nodes). The engine's CLI (engine node
// ...) prints what these return; a Go program can call them with the
// engine's or an admin's connection.
package operator
