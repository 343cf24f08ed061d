// Package runtime is the port between a node agent and the thing that runs
// sandboxes: a Runtime creates Sandboxes, and a Sandbox executes commands
// and file operations confined to its workspace.
//
// Implementations live in subpackages named for what they wrap:
// nodes/runtime/local (a host directory and plain processes; no security
// boundary) and nodes/runtime/docker. The exported contract suite in
// nodes/runtime/runtimetest is what every implementation must pass.
//
// Errors carry errcode codes: invalid_path for a path that leaves the
// workspace, not_found, already_exists, exec_timeout, invalid_state,
// runtime_error for failures of the underlying runtime.
package runtime
