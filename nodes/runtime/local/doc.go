// Package local is the runtime for development and for machines without
// Docker: each sandbox is a directory on the host, and exec runs a plain
// process in it as the node agent's user.
//
// It is NOT a security boundary. Processes see the whole host file system,
// network and process table; only Paddock's own file operations (read,
// write, ls, rm, mkdir) are confined to the workspace, through os.Root, so
// that neither paths nor symlinks planted by a command lead them outside.
// Use the Docker runtime for untrusted code. Nor does it bound a sandbox's
// disk (Spec.DiskBytes is ignored; the create's finish records disk_limit
// mechanism none): its processes can write anywhere the node's user can.
//
// A sandbox lives in <Config.Dir>/<tenant>/<session>/workspace. Its
// lifecycle:
//
//	Create ─► running ──Stop──► stopped
//	             ▲                 │
//	             └──────Start──────┘
//
//	running or stopped ──Shutdown──► shut down (final)
//
// Stop kills the sandbox's processes but keeps the workspace, so file
// operations still work on a stopped sandbox; only exec needs it running.
// Shutdown kills the processes and removes the session directory; after it
// every operation but Running and Shutdown is invalid_state.
package local
