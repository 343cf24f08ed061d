package images_test

import (
	"archive/tar"
	"bytes"
	"context"
	_ "embed"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/images"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/testenv"
)

// Debian bookworm's own /etc/profile and /root/.profile, as debootstrap
// installs them: what a login shell set before issue 26.
var (
	//go:embed profile/profile.debian
	debianProfile string
	//go:embed profile/root.profile.debian
	debianRootProfile string
)

// TestPythonImageLoginShell builds the Python image under a tag of its
// own and checks that a login shell there sets exactly what Debian's
// profiles set (every shell variable, as `set` lists them), for the
// sandbox's user and for root, with and without PS1; and that the image
// has Paddock's profiles (BenchmarkLoginShell has what they save).
func TestPythonImageLoginShell(t *testing.T) {
	tag := pythonImage(t)
	sb := sandboxOf(t, tag)
	if got := run(t, sb, "", nil, "cat", "/etc/profile"); got != images.Profile {
		t.Fatalf("the image's /etc/profile is not images.Profile:\n%s", got)
	}
	if got := run(t, sb, "0", nil, "cat", "/root/.profile"); got != images.RootProfile {
		t.Fatalf("the image's /root/.profile is not images.RootProfile:\n%s", got)
	}
	// What Debian's profiles set, sourced into a plain shell, against what
	// a login shell of the image sets. PPID differs from shell to shell.
	const vars = `set | grep -v '^PPID='`
	debian := `eval "$1"; if [ -r "$HOME/.profile" ]; then eval "$2"; fi; ` + vars
	for _, user := range []string{"", "0"} {
		for _, env := range []map[string]string{nil, {"PS1": "> "}} {
			want := run(t, sb, user, env, "sh", "-c", debian, "sh", debianProfile, debianRootProfile)
			got := run(t, sb, user, env, "sh", "-lc", vars)
			if got != want {
				t.Errorf("user %q, env %v: a login shell sets\n%s\nDebian's profiles set\n%s", user, env, got, want)
			}
			if !strings.Contains(got, "PATH=") {
				t.Errorf("user %q: no PATH in\n%s", user, got)
			}
		}
	}
}

// BenchmarkLoginShell compares sh -c true and sh -lc true through the
// Docker runtime's exec (what a Paddock exec runs), as the sandbox's user,
// in a sandbox of the Python image with Debian's profiles and in one with
// Paddock's, in the same run:
//
//	go test ./images -run '^$' -bench LoginShell -benchtime 100x
func BenchmarkLoginShell(b *testing.B) {
	tag := pythonImage(b)
	sbs := map[string]runtime.Sandbox{"debian": sandboxOf(b, debianPythonImage(b)), "paddock": sandboxOf(b, tag)}
	if got := run(b, sbs["debian"], "", nil, "cat", "/etc/profile"); got != debianProfile {
		b.Fatalf("the baseline image's /etc/profile is not Debian's:\n%s", got)
	}
	for _, profile := range []string{"debian", "paddock"} {
		for _, argv := range [][]string{{"sh", "-c", "true"}, {"sh", "-lc", "true"}} {
			b.Run(profile+"/"+strings.Join(argv[:2], " "), func(b *testing.B) {
				for b.Loop() {
					run(b, sbs[profile], "", nil, argv...)
				}
			})
		}
	}
}

// pythonImage builds the Python image under a tag of its own from the
// cached root file system (the shared tag may be in use, or older),
// removed when the test ends. Without debootstrap or a cached root file
// system it skips, unless CI=true.
func pythonImage(t testing.TB) string {
	t.Helper()
	cli := testenv.DockerClient(t)
	tag := "paddock/sandbox-python:selftest-" + uuid.NewString()[:8]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := images.BuildPython(ctx, cli, tag, images.PythonConfig{}); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the Python image cannot be built: %v", err)
		}
		t.Skipf("cannot build the Python image: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("remove %s: %v", tag, err)
		}
	})
	return tag
}

// debianPythonImage imports the cached root file system of the Python
// image as debootstrap made it, Debian's profiles and all (the baseline
// of BenchmarkLoginShell), under a tag removed when the benchmark ends.
func debianPythonImage(b *testing.B) string {
	b.Helper()
	dir, err := os.UserCacheDir()
	if err != nil {
		b.Skip(err)
	}
	f, err := os.Open(images.PythonConfig{Suite: "bookworm", CacheDir: filepath.Join(dir, "paddock")}.RootfsTarball())
	if err != nil {
		b.Skipf("no cached root file system (pythonImage made the image some other way): %v", err)
	}
	defer f.Close()
	cli := testenv.DockerClient(b)
	tag := "paddock/sandbox-python:debian-" + uuid.NewString()[:8]
	rc, err := cli.ImageImport(b.Context(), image.ImportSource{Source: f, SourceName: "-"}, tag, image.ImportOptions{
		Changes: []string{"ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV LANG=C.UTF-8", "WORKDIR /workspace"},
	})
	if err != nil {
		b.Fatal(err)
	}
	err = images.ProgressErr(rc)
	rc.Close()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return tag
}

// run runs argv in sb as user with env and returns its stdout; anything
// but exit 0 fails the test.
func run(t testing.TB, sb runtime.Sandbox, user string, env map[string]string, argv ...string) string {
	t.Helper()
	res, err := sb.Exec(context.Background(), runtime.ExecSpec{Argv: argv, User: user, Env: env, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q as %q: exit %d, stderr %q, %v", argv, user, res.ExitCode, res.Stderr, err)
	}
	return string(res.Stdout)
}

// TestRewriteTar: the image's files replace their members, keeping their
// headers but the size; every other member is copied as it was.
func TestRewriteTar(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	mtime := time.Unix(1_700_000_000, 0)
	for _, m := range []struct {
		name, body string
		typ        byte
	}{
		{"./", "", tar.TypeDir}, {"./etc/", "", tar.TypeDir}, {"./etc/profile", "debian's\n", tar.TypeReg},
		{"./etc/passwd", "root:x:0:0::/root:/bin/bash\n", tar.TypeReg}, {"./root/.profile", "mesg n\n", tar.TypeReg},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Typeflag: m.typ, Mode: 0o644, Size: int64(len(m.body)), ModTime: mtime}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, m.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	out := images.WithImageFiles(bytes.NewReader(in.Bytes()))
	defer out.Close()
	tr := tar.NewReader(out)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Mode != 0o644 || !h.ModTime.Equal(mtime) {
			t.Errorf("%s: mode %o, mtime %v; want them kept", h.Name, h.Mode, h.ModTime)
		}
		got[h.Name] = string(b)
	}
	want := map[string]string{"./": "", "./etc/": "", "./etc/profile": images.Profile, "./etc/passwd": "root:x:0:0::/root:/bin/bash\n", "./root/.profile": images.RootProfile}
	if len(got) != len(want) {
		t.Fatalf("members %v, want %d", got, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	// A broken tar is an error, not a silent short image.
	bad := images.WithImageFiles(bytes.NewReader(in.Bytes()[:700]))
	defer bad.Close()
	if _, err := io.ReadAll(bad); err == nil {
		t.Error("a cut tar rewrote without an error")
	}
}
