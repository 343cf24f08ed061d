// Package runtimetest is the contract every runtime.Runtime implementation
// must pass, in the spirit of Watermill's tests.TestPubSub: an
// implementation's own test calls Run with a constructor, and the suite
// checks exit codes, output capture, timeouts, environment, working
// directories, file operations, path confinement (symlinks planted by a
// command included), the one symlink rule every runtime follows (relative
// targets inside the workspace only; loops and names too long are
// invalid_path), imports that replace the workspace all or nothing, and
// the sandbox lifecycle.
//
// The commands it runs use only POSIX sh and utilities busybox also
// provides (echo, printf, cat, ln, test, sleep, yes, head, mkdir, chmod,
// ls, basename), so a runtime may run it against a busybox image.
package runtimetest
