// Package runsc is the runtime whose sandboxes pause with their memory:
// gVisor sandboxes run by runsc directly (not through Docker), so that
// runsc's checkpoint and restore can write a sandbox's processes and memory
// to a directory and bring them back running, on this node or another.
//
// # Why runsc directly
//
// Docker 20.10 restores a checkpoint only in the daemon's experimental mode
// (off here; turning it on restarts dockerd), and cannot adopt a container
// that runsc restored behind its back. runsc restore needs the very mount
// layout the checkpoint was taken with, which this package writes itself:
// an OCI bundle per sandbox (bundle.go) over a root file system exported
// once per image from the Docker engine (docker create + docker export) and
// cached read-only under Config.Dir/rootfs. Docker is used for nothing
// else.
//
// # Hardening (as the docker runtime's)
//
//	user           65534:65534 (Spec.User may name another uid[:gid])
//	capabilities   none (every set empty); no-new-privileges
//	root           read-only; /tmp a 64 MiB tmpfs; the workspace a bind mount
//	network        none (runsc --network=none: a loopback only)
//	memory, pids   Spec.MemoryBytes (512 MiB), Spec.PidsLimit as GVisorPids, in a cgroup
//	kernel         gVisor's Sentry (ptrace platform), the gofer serving files
//
// # What it serves
//
// Exec runs `runsc exec` as the sandbox's user (timeouts kill the command
// by its pid in the sandbox); the file operations and workspace export and
// import act on the workspace's host directory through a local sandbox
// (package local), whose os.Root confines every path. Files the node writes
// are given to the sandbox's user. There is no in-sandbox supervisor, so
// no socket to redial after a restore, and no runtime.Processes: a
// long-running process is started by an exec that leaves it in the
// background, and it lives until the sandbox stops, through checkpoints.
//
// # Checkpoints
//
// Checkpoint stops the sandbox with `runsc checkpoint` (its processes and
// memory into checkpoint.img), then writes the workspace, as the stopped
// processes left it, into workspace.tar, and the digests of both into
// checkpoint.json. With leaveRunning it restores the sandbox from that
// image at once (runsc's own --leave-running does the same, and panics on a
// paused container). Restore checks the digests before anything runs,
// imports the workspace and runs `runsc restore` under a runsc root and a
// container id of the new sandbox's own, so that N restores of one
// checkpoint on one node (a fork) run side by side: runsc names a
// sandbox's control socket, abstract and so shared by every runsc root of
// the host, after the container id ("address already in use" otherwise).
//
// # After a node restart
//
// Each sandbox's directory holds RecordFile (its session, epoch, container
// id, image, user, workspace root and environment, 0600), written
// atomically before its container starts. FindSandboxes reads the records
// and returns Sandboxes that drive the sandboxes again, so the node adopts
// or reaps them; a directory without a usable record has its containers
// killed and is removed.
package runsc
