package buildinfo

import (
	"testing"

	"github.com/paddock-dev/paddock/commands"
)

// TestReleaseBuild: what a release build sets with -ldflags -X is what
// --version prints, the commit included once.
func TestReleaseBuild(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	for _, c := range []struct{ version, commit, want string }{
		{"v0.3.0", "0123456789abcdef0123456789abcdef01234567", "v0.3.0 commit 0123456789abcdef0123456789abcdef01234567 (contract " + commands.Version + ")"},
		{"v0.3.0", "0123456789abcdef0123456789abcdef01234567-dirty", "v0.3.0 commit 0123456789abcdef0123456789abcdef01234567-dirty (contract " + commands.Version + ")"},
		// A version that is the commit's prefix (a build from a checkout
		// with no tag) does not repeat it.
		{"0123456789ab", "0123456789abcdef0123456789abcdef01234567", "0123456789ab (contract " + commands.Version + ")"},
	} {
		version, commit = c.version, c.commit
		if got := String(); got != c.want {
			t.Errorf("version %q commit %q: String() = %q, want %q", c.version, c.commit, got, c.want)
		}
		if Version() != c.version || Commit() != c.commit {
			t.Errorf("Version() %q, Commit() %q; want %q, %q", Version(), Commit(), c.version, c.commit)
		}
	}
}
