// Package buildinfo says which build of a Paddock binary is running: the
// module version, or the VCS revision it was built from, and the version
// of the command contract it speaks. engine and agent-node print it for
// --version.
package buildinfo

import (
	"runtime/debug"

	"github.com/paddock-dev/paddock/commands"
)

// Version is the binary's version: the module version when it was built
// from a tagged module (go install ...@v1.2.3), else the VCS revision
// (with "-dirty" for uncommitted changes), else "devel".
func Version() string {
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

// String is the one line --version prints: the binary's version and the
// contract's ("v1.2.3 (contract 1.4)").
func String() string {
	return Version() + " (contract " + commands.Version + ")"
}
