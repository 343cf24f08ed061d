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
//
// # Imports
//
// runtimetest is test support that library packages' tests import, but
// it is itself a library package: it must not import testenv (the rule:
// testenv is imported only by _test.go files). What it needs from a test's
// environment (the image, a runtime) comes in through Run's constructor
// and Options; a helper both it and testenv's users need lives here (as
// TarMembers does) or in a small package of its own. TestNoTestenv checks
// the rule.
package runtimetest
