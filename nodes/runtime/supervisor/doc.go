// Package supervisor is the in-sandbox supervisor of the Docker runtime,
// the framed protocol it speaks with its node, and both ends of it: the
// Server that cmd/paddock-supervisor runs inside a sandbox (through the
// local runtime, its sibling), and the Client the Docker runtime calls it
// with.
//
// The Docker daemon's exec path costs tens of milliseconds per command and
// per file operation (exec create, attach and inspect; archive copies).
// The supervisor (cmd/paddock-supervisor) runs inside every container
// instead, as the sandbox's user with no privileges, and serves exec,
// processes (with ptys) and file operations through the local runtime
// (os.Root confinement inside the container), so a command costs a round
// trip on a unix socket and a fork.
//
// # Channel
//
// The node listens on a unix socket in a directory of its own per sandbox
// and bind-mounts that directory read-only into the container; the
// supervisor dials it. Nothing inside can write there, no network is
// needed inside, and the socket a connection arrives on tells the node
// which sandbox it is: a sandbox can only ever speak for itself. (The
// container's attach stream was the other choice: it passes through the
// daemon, which copies every byte and logs it to the container's log.)
//
// # Frames
//
// Every frame is a 9-byte header (payload length, big-endian uint32; type,
// one byte; stream id, big-endian uint32) and a payload of at most
// MaxFrame bytes. The supervisor says Hello first; the node opens a stream
// per operation with a Call, data flows as Data (and Stderr) frames with a
// per-stream window of Window bytes returned by Ack frames, and the
// supervisor ends the stream with a Result. The node pings; a supervisor
// silent for Options.Silence is given up.
//
// # Tunnels
//
// The dial, listen and accept calls carry TCP between the node and the
// sandbox's loopback (tunnel.go, tunnelclient.go): the gvisor runtime's
// exposed ports and egress proxy go through them, since the node cannot
// enter gVisor's network stack as it enters a container's namespace.
//
// # Trust
//
// The sandbox's code runs as the supervisor's user: it can kill the
// supervisor, or connect to the socket itself and pretend to be one. So
// the node's end (Options.Node) trusts nothing it reads: a frame over
// MaxFrame, an unknown or misdirected type, data beyond the window, more
// than MaxQueued frames queued, a frame on a stream the node never opened
// or a malformed hello ends the connection with ErrProtocol, and the calls
// on it get typed errors. What a supervisor reports (exit codes, output,
// file contents) is about its own sandbox only.
package supervisor
