package docs_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// module is the module path the layering rules are written under.
const module = "github.com/paddock-dev/paddock"

// arrow is a forbidden dependency: no package matched by from (and not by
// except) may depend, directly or through others, on a package matched by
// to. A pattern is a path under the module, "x/..." for x and everything
// under it, "..." for every package. Only the packages' own files count:
// a test may import what it likes.
type arrow struct {
	from   string
	except []string
	to     string
}

// arrows are the layers of docs/architecture.md: libraries never import
// upward, runtimes never import the node that drives them, testenv is for
// tests only.
var arrows = []arrow{
	{from: "scheduler/...", to: "nodes/..."},
	{from: "nodes/runtime/...", to: "nodes"},
	{from: "nodes/runtime/...", to: "scheduler/..."},
	{from: "images/...", to: "nodes/..."},
	{from: "client/...", to: "nodes/..."},
	{from: "operator/...", to: "nodes/..."},
	{from: "cluster/...", to: "nodes/..."},
	{from: "readiness/...", to: "nodes/..."},
	{from: "provision/...", to: "nodes/..."},
	{from: "mcpserver/...", to: "nodes/..."},
	{from: "mcpserver/...", to: "scheduler/..."},
	{from: "...", except: []string{"testenv/..."}, to: "testenv/..."},
	{from: "...", except: []string{"cmd/..."}, to: "cmd/..."},
}

// TestLayers checks arrows against `go list`: every package's imports and
// dependencies, tests left out.
func TestLayers(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the packages with")
	}
	cmd := exec.Command(gobin, "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", module+"/...")
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	type pkg struct{ imports, deps []string }
	pkgs := map[string]pkg{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			t.Fatalf("go list line %q: want path|imports|deps", line)
		}
		pkgs[rel(f[0])] = pkg{imports: relAll(strings.Fields(f[1])), deps: relAll(strings.Fields(f[2]))}
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list named %d packages; want the module's", len(pkgs))
	}

	for _, a := range arrows {
		name := a.from + " -> " + a.to
		matched := 0
		var bad []string
		for p, info := range pkgs {
			if !match(a.from, p) || matchAny(a.except, p) {
				continue
			}
			matched++
			for _, d := range info.deps {
				if !match(a.to, d) {
					continue
				}
				// Name the import it comes through.
				via := d
				for _, i := range info.imports {
					if i == d || slicesContain(pkgs[i].deps, d) {
						via = i
						break
					}
				}
				if via == d {
					bad = append(bad, p+" imports "+d)
				} else {
					bad = append(bad, p+" depends on "+d+" through "+via)
				}
			}
		}
		if matched == 0 {
			t.Errorf("%s: no package matches %q; the row checks nothing", name, a.from)
			continue
		}
		for _, b := range bad {
			t.Errorf("%s is forbidden: %s", name, b)
		}
	}
}

// TestLayersMatch pins the pattern language of arrows.
func TestLayersMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, pkg string
		want         bool
	}{
		{"nodes", "nodes", true},
		{"nodes", "nodes/runtime", false},
		{"nodes/...", "nodes", true},
		{"nodes/...", "nodes/runtime/local", true},
		{"nodes/...", "nodesx", false},
		{"...", "errcode", true},
		{"cmd/...", "commands", false},
	} {
		if got := match(tc.pattern, tc.pkg); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.pattern, tc.pkg, got, tc.want)
		}
	}
}

// rel returns an import path relative to the module ("" for a package
// outside it, which no arrow names).
func rel(p string) string {
	if r, ok := strings.CutPrefix(p, module+"/"); ok {
		return r
	}
	return ""
}

func relAll(ps []string) []string {
	var out []string
	for _, p := range ps {
		if r := rel(p); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// match reports whether pkg (module-relative) is matched by pattern.
func match(pattern, pkg string) bool {
	if pattern == "..." {
		return pkg != ""
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchAny(patterns []string, pkg string) bool {
	for _, p := range patterns {
		if match(p, pkg) {
			return true
		}
	}
	return false
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
