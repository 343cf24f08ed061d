// Package buildinfo says which build of a Paddock binary is running: the
// module version, or the VCS revision it was built from, and the version
// of the command contract it speaks. engine and agent-node print it for
// --version.
package buildinfo

import (
	"runtime/debug"
	"strings"

	"github.com/paddock-dev/paddock/commands"
)

// version and commit are set by a release build (scripts/release.sh):
//
//	go build -ldflags "-X github.com/paddock-dev/paddock/cmd/internal/buildinfo.version=v0.3.0 \
//	  -X github.com/paddock-dev/paddock/cmd/internal/buildinfo.commit=<git rev-parse HEAD>"
//
// They are the only package-level variables here and never change at run
// time.
var version, commit string

// Version is the binary's version: the release build's (-ldflags -X, see
// scripts/release.sh), else the module version when it was built from a
// tagged module (go install ...@v1.2.3), else the VCS revision (with
// "-dirty" for uncommitted changes), else "devel".
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// Commit is the VCS revision the binary was built from: the release
// build's (-ldflags -X), else the one the Go toolchain stamped
// (vcs.revision), else "" when neither is known.
func Commit() string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}

// String is the one line --version prints: the binary's version, the
// commit when a release build names one that the version does not already
// show, and the contract's ("v1.2.3 commit 0123abcd… (contract 1.4)").
func String() string {
	s := Version()
	if c := Commit(); c != "" && !strings.HasPrefix(c, strings.TrimSuffix(s, "-dirty")) {
		s += " commit " + c
	}
	return s + " (contract " + commands.Version + ")"
}
