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
//	logs           json-file, max-size 1m, one file: a sandbox cannot fill the disk
//	init           Docker's init as pid 1, so orphans are reaped
//
// Every container is named paddock-<tenant>-<session> and labelled
// paddock.session, paddock.tenant, paddock.node, paddock.epoch and
// paddock.workspace_root; the create spec's labels go under
// paddock.label.<key>. FindSandboxes finds a node's containers again by
// these labels after the node agent restarts.
//
// # Exec
//
// Exec runs through exec create/attach/inspect, with stdout and stderr
// demultiplexed (stdcopy) into capped buffers that keep counting past the
// cap. Every exec carries a marker variable (PADDOCK_EXEC=<id>); on a
// timeout or a cancelled context a second exec, as the same user, kills
// every process that carries the marker, so a command's whole tree dies,
// background children included. A process that scrubs its environment
// escapes that kill, but not the pids limit, Stop or Shutdown. The image
// needs /bin/sh, cat and tr for that kill (the base image has busybox).
//
// # Files
//
// File operations use the archive endpoints (CopyFromContainer,
// CopyToContainer, ContainerStatPath), which work on stopped containers too;
// only Remove needs a running container (it runs rm in it). Every path is
// first confined lexically (runtime.Rel) and then resolved component by
// component inside the container: a symlink is followed only when its
// target lies inside the workspace root, anything else is invalid_path.
// Everything inside the container is treated as hostile (CVE-2018-15664):
// a command could swap a directory for a symlink between the check and
// the copy, but the daemon resolves every copy path inside the container's
// root file system, so such a race reaches at most the container's own
// files, never the host's. Written files belong to the sandbox user.
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
