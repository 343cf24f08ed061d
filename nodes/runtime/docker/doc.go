// Package docker is the runtime users deploy: each sandbox is a container
// on the node's Docker engine, driven through the Engine API
// (github.com/docker/docker/client, API version negotiated).
//
// # Hardened by default
//
// A create spec loosens a default only explicitly (runtime.Spec fields):
//
//	capabilities   CapDrop ALL
//	privileges     no-new-privileges; Docker's default seccomp profile (never unconfined)
//	user           65534:65534 (nobody); Spec.User "0" asks for root (still without capabilities)
//	network        none; Spec.Network gives the default bridge
//	processes      pids limit 512 (Spec.PidsLimit)
//	memory         512 MiB, swap equal to memory (no swap) (Spec.MemoryBytes)
//	cpu            1 CPU (Spec.CPUs)
//	disk           2 GiB for everything it writes (Spec.DiskBytes): storage-opt, or a
//	               loopfs image under a read-only root; see disk.go
//	logs           json-file, max-size 1m, one file
//	init           Docker's init as pid 1, so orphans are reaped
//
// Every container is named paddock-<tenant>-<session> (with .e<epoch> after
// the first epoch, and a hashed form for identifiers Docker would refuse or
// that could be ambiguous: see ContainerName) and labelled paddock.session,
// paddock.tenant, paddock.node, paddock.epoch and paddock.workspace_root;
// the create spec's labels go under paddock.label.<key>. FindSandboxes
// finds a node's containers again by these labels after the node agent
// restarts. The workspace root is made a directory owned by the sandbox
// user (an archive copy of one directory entry with its uid and gid, as
// the user may not be root and nobody inside has the capability to chown),
// unless the image already has it so.
//
// # The in-sandbox supervisor and warm pools
//
// With Config.Supervisor, every container also runs the supervisor
// (package supervisor, cmd/paddock-supervisor), bind-mounted read-only and
// started by the keep-alive as the sandbox's user; it dials a unix socket
// the node listens on in a directory of its own per container (link.go).
// While it is connected, exec, processes and the file operations go
// through it (supervisor.Client) in a few milliseconds, and what follows
// describes the Docker API path they take otherwise: another user, a file
// the sandbox's user may not touch, no supervisor (supervised.go). One
// place, Sandbox.ops (ops.go), chooses between the two for each call.
// StartPools keeps warm pools of such containers (pool.go).
//
// # Exec
//
// Exec runs through exec create/attach/inspect, with stdout and stderr
// demultiplexed (stdcopy) into capped buffers that keep counting past the
// cap. The argv runs under a small /bin/sh wrapper in a session of its own
// (runc makes every exec a session leader): the wrapper reports its pid,
// and when the command exits it kills whatever the command left in the
// session. On a timeout or a cancelled context a second exec, as the same
// user, freezes and then kills the whole session and its descendants. Both
// kills use shell builtins only, so an image needs /bin/sh and nothing more
// for them; see wrapper.go.
//
// # Processes
//
// StartProcess (runtime.Processes) runs an exec with stdin attached through
// the same wrapper, with or without a TTY, and returns once the wrapper has
// reported its pid. One goroutine per process copies the stream (raw on a
// TTY, else stdout and stderr demultiplexed into one) into a buffer of up to
// 1 MiB that Read drains, so a process can exit with its output unread.
// Signal is a second exec that signals the session's processes but the
// wrapper, which lives on to empty the session and report how the program
// ended; SIGKILL and Close use the exec's kill. Resize is the exec resize
// call (engines before API 1.42 ignore the initial size at create, so it is
// set by a resize right after the start). See process.go.
//
// # Files
//
// Every path is first confined lexically (runtime.Rel: no escape, no name
// over 255 bytes, no path over 4,095) and then resolved component by
// component inside the container (ContainerStatPath, which does not follow
// a path's last component): a symlink is followed only when its target, as
// the link's own text says it (the Linkname of the link's archive; the
// daemon's stat reports targets already resolved), is relative and never
// leaves the workspace on its way, the rule of the local runtime's os.Root
// and of the archive checks. An absolute target is invalid_path even when
// it names a path inside the workspace, and so is a loop of links. ls,
// write and rm do not follow a symlink as the last component (ls lists it,
// write replaces it, rm removes it); read, mkdir -p and exec's cwd do.
// Everything inside the container is treated as hostile (CVE-2018-15664):
// a command could swap a directory for a symlink between the check and the
// operation, but the daemon resolves every archive copy inside the
// container's root file system, and the execs below enter their directory
// with cd -P and check it again, so such a race reaches at most the
// container's own files, never the host's.
//
// Reads, writes and mkdir use the archive endpoints (CopyFromContainer,
// CopyToContainer), which work on stopped containers too; written files and
// directories belong to the sandbox user, with the mode asked for. List
// runs one exec of sh and stat on a running sandbox (its cost does not grow
// with the size of what lies below the directory) and reads the
// directory's archive on a stopped one. Remove runs rm in the container;
// on a stopped sandbox it starts the container for the rm and stops it
// again, with Start, Stop and exec held off meanwhile (the API has no file
// delete).
//
// # Workspaces
//
// ExportWorkspace reads the root's archive. StageWorkspace (which the node
// uses for hydrate and resume, ImportWorkspace being stage and commit)
// extracts the incoming archive as it streams into .paddock/staging-* beside
// the workspace root, owned by the sandbox user, and its commit moves the
// workspace's entries out and the staged ones in, all or nothing; see
// workspace.go for why entries and not the root are moved. On a loopfs
// disk the node does the moves on its own mount of the disk (swap.go).
//
// # Lifecycle
//
//	Create ─► running ──Stop──► stopped (container kept)
//	             ▲                 │
//	             └──────Start──────┘
//	running or stopped ──Shutdown──► removed (final)
//
// A failed Create removes whatever it made; the container is looked up by
// name, since Docker can create one even when the create call fails.
package docker
