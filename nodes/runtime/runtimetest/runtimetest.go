package runtimetest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/nodes/runtime"
)

// Tenant is the tenant of every sandbox the suite creates.
const Tenant = "contract"

// Options tunes the suite for a runtime.
type Options struct {
	// Image is passed as Spec.Image to every Create.
	Image string
}

// bound is how long a command that should be killed may take to return. It
// is a bound against hanging, not a timing assertion.
const bound = 20 * time.Second

// Run runs the contract suite as parallel subtests of t. newRuntime is
// called once per subtest and may register cleanups on the t it is given;
// every subtest creates its own sandbox and shuts it down when it ends.
func Run(t *testing.T, newRuntime func(t *testing.T) runtime.Runtime, opts Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"ExitCodes", testExitCodes},
		{"OutputSeparation", testOutputSeparation},
		{"Timeout", testTimeout},
		{"Env", testEnv},
		{"Cwd", testCwd},
		{"LargeOutput", testLargeOutput},
		{"FileRoundTrip", testFileRoundTrip},
		{"ReadLimit", testReadLimit},
		{"List", testList},
		{"RemoveAndMkdir", testRemoveAndMkdir},
		{"PathEscapes", testPathEscapes},
		{"SymlinkEscapes", testSymlinkEscapes},
		{"SymlinkRule", testSymlinkRule},
		{"SymlinkLoops", testSymlinkLoops},
		{"LongNames", testLongNames},
		{"ImportReadOnlyTree", testImportReadOnlyTree},
		{"StagedImport", testStagedImport},
		{"WorkspaceRoot", testWorkspaceRoot},
		{"Lifecycle", testLifecycle},
		{"StopKillsCommands", testStopKillsCommands},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, &suite{rt: newRuntime(t), opts: opts})
		})
	}
}

// suite is what a subtest gets: the runtime under test and the options.
type suite struct {
	rt   runtime.Runtime
	opts Options
}

// sandbox creates a sandbox with a fresh session id and shuts it down when
// the test ends.
func (s *suite) sandbox(t *testing.T, env map[string]string, workspaceRoot string) runtime.Sandbox {
	t.Helper()
	spec := runtime.Spec{
		Tenant:        Tenant,
		SessionID:     uuid.NewString(),
		Node:          "contract-node",
		Epoch:         1,
		Image:         s.opts.Image,
		Env:           env,
		Labels:        map[string]string{"paddock.contract": "true"},
		WorkspaceRoot: workspaceRoot,
	}
	sb, err := s.rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return sb
}

func sh(script string) []string { return []string{"sh", "-c", script} }

// run executes argv and fails the test if Exec returns an error.
func run(t *testing.T, sb runtime.Sandbox, spec runtime.ExecSpec) runtime.ExecResult {
	t.Helper()
	res, err := sb.Exec(t.Context(), spec)
	if err != nil {
		t.Fatalf("Exec %q: %v", spec.Argv, err)
	}
	return res
}

// runOK executes argv, failing the test unless it exits 0, and returns
// its stdout.
func runOK(t *testing.T, sb runtime.Sandbox, argv ...string) string {
	t.Helper()
	res := run(t, sb, runtime.ExecSpec{Argv: argv})
	if res.ExitCode != 0 {
		t.Fatalf("Exec %q: exit code %d, stderr %q", argv, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// wantCode fails the test unless err carries code.
func wantCode(t *testing.T, what string, err error, code errcode.Code) {
	t.Helper()
	if got := errcode.Of(err); got != code {
		t.Errorf("%s: got error %v (code %q), want code %q", what, err, got, code)
	}
}

func write(t *testing.T, sb runtime.Sandbox, path string, data []byte, mode fs.FileMode) {
	t.Helper()
	if err := sb.WriteFile(t.Context(), path, data, mode); err != nil {
		t.Fatalf("WriteFile %s: %v", path, err)
	}
}

func testExitCodes(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	for _, tc := range []struct {
		argv []string
		want int
	}{
		{sh("exit 0"), 0},
		{sh("exit 3"), 3},
		{sh("exit 255"), 255},
		{[]string{"paddock-contract-no-such-program"}, 127},
	} {
		res := run(t, sb, runtime.ExecSpec{Argv: tc.argv})
		if res.ExitCode != tc.want {
			t.Errorf("Exec %q: got exit code %d, want %d", tc.argv, res.ExitCode, tc.want)
		}
	}
}

func testOutputSeparation(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	res := run(t, sb, runtime.ExecSpec{Argv: sh("echo out; echo err >&2")})
	if got, want := string(res.Stdout), "out\n"; got != want {
		t.Errorf("stdout: got %q, want %q", got, want)
	}
	if got, want := string(res.Stderr), "err\n"; got != want {
		t.Errorf("stderr: got %q, want %q", got, want)
	}
	if res.StdoutBytes != 4 || res.StderrBytes != 4 {
		t.Errorf("byte counts: got %d/%d, want 4/4", res.StdoutBytes, res.StderrBytes)
	}
	if res.StdoutTruncated || res.StderrTruncated {
		t.Errorf("truncated: got %v/%v, want false/false", res.StdoutTruncated, res.StderrTruncated)
	}
}

func testTimeout(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	for _, argv := range [][]string{
		{"sleep", "30"},
		sh("sleep 30 & sleep 30"), // the background child holds the output pipes too
	} {
		start := time.Now()
		_, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: argv, Timeout: 300 * time.Millisecond})
		elapsed := time.Since(start)
		if !errors.Is(err, errcode.ErrExecTimeout) {
			t.Errorf("Exec %q: got error %v, want exec_timeout", argv, err)
		}
		if elapsed > bound {
			t.Errorf("Exec %q: returned after %s, want under %s", argv, elapsed, bound)
		}
	}
	// The sandbox survives a timeout.
	if got, want := runOK(t, sb, "echo", "alive"), "alive\n"; got != want {
		t.Errorf("after timeouts: got %q, want %q", got, want)
	}
}

func testEnv(t *testing.T, s *suite) {
	sb := s.sandbox(t, map[string]string{"PADDOCK_A": "sandbox-a", "PADDOCK_B": "sandbox-b"}, "")
	script := sh(`printf '%s %s %s' "$PADDOCK_A" "$PADDOCK_B" "$PADDOCK_C"`)
	res := run(t, sb, runtime.ExecSpec{Argv: script, Env: map[string]string{"PADDOCK_B": "exec-b", "PADDOCK_C": "exec-c"}})
	if got, want := string(res.Stdout), "sandbox-a exec-b exec-c"; got != want {
		t.Errorf("with exec env: got %q, want %q", got, want)
	}
	// An exec's env applies to that command only.
	res = run(t, sb, runtime.ExecSpec{Argv: script})
	if got, want := string(res.Stdout), "sandbox-a sandbox-b "; got != want {
		t.Errorf("without exec env: got %q, want %q", got, want)
	}
}

func testCwd(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	if err := sb.Mkdir(t.Context(), "sub", false); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	for _, cwd := range []string{"sub", runtime.DefaultWorkspaceRoot + "/sub"} {
		res := run(t, sb, runtime.ExecSpec{Argv: sh("pwd"), Cwd: cwd})
		if got := strings.TrimSuffix(string(res.Stdout), "\n"); !strings.HasSuffix(got, "/sub") {
			t.Errorf("pwd in %q: got %q, want a path ending in /sub", cwd, got)
		}
	}
	write(t, sb, "sub/f.txt", []byte("in sub"), 0o644)
	res := run(t, sb, runtime.ExecSpec{Argv: []string{"cat", "f.txt"}, Cwd: "sub"})
	if got, want := string(res.Stdout), "in sub"; got != want {
		t.Errorf("cat f.txt in sub: got %q, want %q", got, want)
	}

	_, err := sb.Exec(t.Context(), runtime.ExecSpec{Argv: sh("pwd"), Cwd: "../x"})
	wantCode(t, "cwd ../x", err, errcode.InvalidPath)
	_, err = sb.Exec(t.Context(), runtime.ExecSpec{Argv: sh("pwd"), Cwd: "missing"})
	wantCode(t, "cwd missing", err, errcode.NotFound)
}

func testLargeOutput(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	res := run(t, sb, runtime.ExecSpec{Argv: sh("yes | head -c 2000000"), MaxOutput: 1000})
	if res.ExitCode != 0 {
		t.Errorf("exit code: got %d, want 0 (stderr %q)", res.ExitCode, res.Stderr)
	}
	if got, want := len(res.Stdout), 1000; got != want {
		t.Errorf("kept stdout: got %d bytes, want %d", got, want)
	}
	if want := bytes.Repeat([]byte("y\n"), 500); !bytes.Equal(res.Stdout, want) {
		t.Errorf("kept stdout: got %.20q..., want %.20q...", res.Stdout, want)
	}
	if !res.StdoutTruncated {
		t.Errorf("StdoutTruncated: got false, want true")
	}
	if got, want := res.StdoutBytes, int64(2000000); got != want {
		t.Errorf("StdoutBytes: got %d, want %d", got, want)
	}
}

func testFileRoundTrip(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	write(t, sb, "a/b/c.txt", all, 0o600)
	got, mode, err := sb.ReadFile(ctx, "a/b/c.txt", 1<<20)
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	if !bytes.Equal(got, all) {
		t.Errorf("content: got %q, want all 256 byte values", got)
	}
	if mode != 0o600 {
		t.Errorf("mode: got %o, want 600", mode)
	}

	// Overwriting replaces content and mode; the umask does not apply.
	write(t, sb, "a/b/c.txt", []byte("new"), 0o777)
	got, mode, err = sb.ReadFile(ctx, "/workspace/a/b/c.txt", 1<<20)
	if err != nil {
		t.Fatalf("ReadFile after overwrite: %v", err)
	}
	if string(got) != "new" || mode != 0o777 {
		t.Errorf("after overwrite: got %q mode %o, want %q mode 777", got, mode, "new")
	}

	write(t, sb, runtime.DefaultWorkspaceRoot+"/x.txt", []byte("absolute"), 0o644)
	got, _, err = sb.ReadFile(ctx, "x.txt", 1<<20)
	if err != nil || string(got) != "absolute" {
		t.Errorf("ReadFile x.txt: got %q, %v, want %q, nil", got, err, "absolute")
	}
	if out := runOK(t, sb, "cat", "x.txt"); out != "absolute" {
		t.Errorf("cat x.txt: got %q, want %q", out, "absolute")
	}
	// And a file a command writes is readable.
	runOK(t, sb, "sh", "-c", "printf 'from exec' > made.txt")
	got, _, err = sb.ReadFile(ctx, "made.txt", 1<<20)
	if err != nil || string(got) != "from exec" {
		t.Errorf("ReadFile made.txt: got %q, %v, want %q, nil", got, err, "from exec")
	}

	_, _, err = sb.ReadFile(ctx, "missing.txt", 1<<20)
	wantCode(t, "ReadFile missing.txt", err, errcode.NotFound)
	wantCode(t, "WriteFile onto a directory", sb.WriteFile(ctx, "a/b", []byte("x"), 0o644), errcode.InvalidRequest)
	wantCode(t, "WriteFile onto the root", sb.WriteFile(ctx, ".", []byte("x"), 0o644), errcode.InvalidPath)
}

func testReadLimit(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	write(t, sb, "big", bytes.Repeat([]byte{'z'}, 2000), 0o644)
	_, _, err := sb.ReadFile(t.Context(), "big", 1000)
	wantCode(t, "ReadFile 2000 bytes with limit 1000", err, errcode.PayloadTooLarge)
	got, _, err := sb.ReadFile(t.Context(), "big", 2000)
	if err != nil || len(got) != 2000 {
		t.Errorf("ReadFile with limit 2000: got %d bytes, %v, want 2000 bytes, nil", len(got), err)
	}
}

func testList(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	write(t, sb, "b.txt", []byte("bbb"), 0o644)
	write(t, sb, "a.txt", []byte("a"), 0o640)
	if err := sb.Mkdir(ctx, "c", false); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	entries, err := sb.List(ctx, ".")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	type row struct{ name, typ string }
	var got []row
	for _, e := range entries {
		got = append(got, row{e.Name, e.Type})
	}
	if want := []row{{"a.txt", "file"}, {"b.txt", "file"}, {"c", "dir"}}; !slices.Equal(got, want) {
		t.Fatalf("List .: got %v, want %v", got, want)
	}
	// Directory modes depend on the umask; file modes were set exactly.
	for i, want := range []struct {
		size int64
		mode uint32
	}{{1, 0o640}, {3, 0o644}} {
		if e := entries[i]; e.Size != want.size || e.Mode != want.mode {
			t.Errorf("%s: got size %d mode %o, want size %d mode %o", e.Name, e.Size, e.Mode, want.size, want.mode)
		}
	}

	entries, err = sb.List(ctx, "b.txt")
	if err != nil || len(entries) != 1 || entries[0].Name != "b.txt" || entries[0].Type != "file" || entries[0].Size != 3 {
		t.Errorf("List b.txt: got %+v, %v, want one file entry b.txt of 3 bytes", entries, err)
	}
	entries, err = sb.List(ctx, "c")
	if err != nil || len(entries) != 0 {
		t.Errorf("List c: got %+v, %v, want no entries", entries, err)
	}
	_, err = sb.List(ctx, "missing")
	wantCode(t, "List missing", err, errcode.NotFound)
}

func testRemoveAndMkdir(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	if err := sb.Mkdir(ctx, "d", false); err != nil {
		t.Fatalf("Mkdir d: %v", err)
	}
	wantCode(t, "Mkdir d again", sb.Mkdir(ctx, "d", false), errcode.AlreadyExists)
	if err := sb.Mkdir(ctx, "d", true); err != nil {
		t.Errorf("Mkdir d again with parents: got %v, want nil", err)
	}
	wantCode(t, "Mkdir p/q/r", sb.Mkdir(ctx, "p/q/r", false), errcode.NotFound)
	if err := sb.Mkdir(ctx, "p/q/r", true); err != nil {
		t.Fatalf("Mkdir p/q/r with parents: %v", err)
	}
	write(t, sb, "p/q/r/f", []byte("x"), 0o644)
	wantCode(t, "Mkdir over a file", sb.Mkdir(ctx, "p/q/r/f", false), errcode.AlreadyExists)

	wantCode(t, "Remove p without recursive", sb.Remove(ctx, "p", false), errcode.InvalidRequest)
	if err := sb.Remove(ctx, "p/q/r/f", false); err != nil {
		t.Errorf("Remove file: %v", err)
	}
	if err := sb.Remove(ctx, "d", false); err != nil {
		t.Errorf("Remove empty dir: %v", err)
	}
	if err := sb.Remove(ctx, "p", true); err != nil {
		t.Errorf("Remove p recursive: %v", err)
	}
	entries, err := sb.List(ctx, ".")
	if err != nil || len(entries) != 0 {
		t.Errorf("List after removals: got %+v, %v, want no entries", entries, err)
	}
	wantCode(t, "Remove .", sb.Remove(ctx, ".", true), errcode.InvalidPath)
	wantCode(t, "Remove /workspace", sb.Remove(ctx, runtime.DefaultWorkspaceRoot, true), errcode.InvalidPath)
	wantCode(t, "Remove missing", sb.Remove(ctx, "missing", false), errcode.NotFound)
	wantCode(t, "Remove missing recursive", sb.Remove(ctx, "missing", true), errcode.NotFound)
}

func testPathEscapes(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	for _, p := range []string{"../etc/passwd", "/etc/passwd", "a/../../etc/passwd", "/workspacex/f"} {
		_, _, err := sb.ReadFile(ctx, p, 1<<20)
		wantCode(t, "ReadFile "+p, err, errcode.InvalidPath)
	}
	wantCode(t, "WriteFile ../../x", sb.WriteFile(ctx, "../../x", []byte("x"), 0o644), errcode.InvalidPath)
	wantCode(t, "Mkdir ../x", sb.Mkdir(ctx, "../x", true), errcode.InvalidPath)
	wantCode(t, "Remove ../x", sb.Remove(ctx, "../x", true), errcode.InvalidPath)
	_, err := sb.List(ctx, "/")
	wantCode(t, "List /", err, errcode.InvalidPath)
}

func testSymlinkEscapes(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	outside := "/tmp/paddock-contract-" + uuid.NewString()
	runOK(t, sb, "sh", "-c", "ln -s / escape && ln -s /etc/passwd pw && ln -s .. up && echo keep > "+outside)
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run; the sandbox is
		// shut down after this cleanup (cleanups run last first).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = sb.Exec(ctx, runtime.ExecSpec{Argv: []string{"rm", "-f", outside, outside + "-w"}})
	})

	entries, err := sb.List(ctx, ".")
	if err != nil {
		t.Fatalf("List .: %v", err)
	}
	for _, e := range entries {
		if e.Type != "symlink" {
			t.Errorf("List .: %s has type %q, want symlink", e.Name, e.Type)
		}
	}
	for _, p := range []string{"escape/etc/passwd", "pw", "up/x", "escape" + outside} {
		_, _, err := sb.ReadFile(ctx, p, 1<<20)
		wantCode(t, "ReadFile "+p, err, errcode.InvalidPath)
	}
	wantCode(t, "WriteFile escape"+outside+"-w", sb.WriteFile(ctx, "escape"+outside+"-w", []byte("x"), 0o644), errcode.InvalidPath)
	wantCode(t, "WriteFile up/x", sb.WriteFile(ctx, "up/x", []byte("x"), 0o644), errcode.InvalidPath)
	wantCode(t, "Mkdir escape"+outside+"-w", sb.Mkdir(ctx, "escape"+outside+"-w", true), errcode.InvalidPath)
	wantCode(t, "Remove escape"+outside, sb.Remove(ctx, "escape"+outside, false), errcode.InvalidPath)
	_, err = sb.List(ctx, "escape/etc")
	wantCode(t, "List escape/etc", err, errcode.InvalidPath)
	// A symlink as the last component is listed, not followed.
	for _, p := range []string{"escape", "up", "pw"} {
		wantLink(t, sb, p)
	}
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: sh("pwd"), Cwd: "escape/tmp"})
	wantCode(t, "Exec in escape/tmp", err, errcode.InvalidPath)

	// Nothing was written or removed outside the workspace.
	if res := run(t, sb, runtime.ExecSpec{Argv: []string{"test", "-e", outside + "-w"}}); res.ExitCode == 0 {
		t.Errorf("%s-w exists outside the workspace, want it absent", outside)
	}
	if got := runOK(t, sb, "cat", outside); got != "keep\n" {
		t.Errorf("%s: got %q, want %q", outside, got, "keep\n")
	}
}

// wantLink fails the test unless List of p returns the symlink p itself.
func wantLink(t *testing.T, sb runtime.Sandbox, p string) {
	t.Helper()
	entries, err := sb.List(t.Context(), p)
	if err != nil || len(entries) != 1 || entries[0].Type != "symlink" || entries[0].Name != path.Base(p) {
		t.Errorf("List %s: got %+v, %v, want the symlink %s itself", p, entries, err, path.Base(p))
	}
}

// testSymlinkRule: every runtime follows a symlink only when its target is
// relative and, resolved from the link's directory, never leaves the
// workspace (the rule of os.Root and of the archive checks). An absolute
// target is refused even when it names a path inside the workspace.
func testSymlinkRule(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	write(t, sb, "data/f.txt", []byte("inside"), 0o644)
	if err := sb.Mkdir(ctx, "data/sub", false); err != nil {
		t.Fatalf("Mkdir data/sub: %v", err)
	}
	// $PWD is the workspace root as the sandbox's processes see it, so the
	// absolute links below name paths inside the workspace on every runtime.
	runOK(t, sb, "sh", "-c", `ln -s "$PWD/data" abs && ln -s "$PWD/data/f.txt" absf && mkdir sub && ln -s "$PWD/data" sub/abs &&
ln -s data rel && ln -s data/f.txt relf && ln -s rel chain && ln -s ../data sub/up && ln -s "../$(basename "$PWD")/data" back`)

	// Absolute targets, though they name the workspace's own data.
	for _, p := range []string{"absf", "abs/f.txt", "sub/abs/f.txt"} {
		_, _, err := sb.ReadFile(ctx, p, 1<<20)
		wantCode(t, "ReadFile "+p, err, errcode.InvalidPath)
	}
	for _, p := range []string{"abs/sub", "sub/abs/sub"} {
		_, err := sb.List(ctx, p)
		wantCode(t, "List "+p, err, errcode.InvalidPath)
	}
	for _, p := range []string{"abs/new.txt", "sub/abs/new.txt", "abs/sub/new.txt"} {
		wantCode(t, "WriteFile "+p, sb.WriteFile(ctx, p, []byte("x"), 0o644), errcode.InvalidPath)
	}
	wantCode(t, "Mkdir abs/m", sb.Mkdir(ctx, "abs/m", false), errcode.InvalidPath)
	wantCode(t, "Mkdir -p abs/m/n", sb.Mkdir(ctx, "abs/m/n", true), errcode.InvalidPath)
	wantCode(t, "Mkdir -p abs", sb.Mkdir(ctx, "abs", true), errcode.InvalidPath)
	wantCode(t, "Mkdir abs", sb.Mkdir(ctx, "abs", false), errcode.AlreadyExists)
	wantCode(t, "Remove abs/f.txt", sb.Remove(ctx, "abs/f.txt", false), errcode.InvalidPath)
	wantCode(t, "Remove -r abs/sub", sb.Remove(ctx, "abs/sub", true), errcode.InvalidPath)
	for _, cwd := range []string{"abs", "abs/sub", "sub/abs"} {
		_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: sh("pwd"), Cwd: cwd})
		wantCode(t, "Exec in "+cwd, err, errcode.InvalidPath)
	}
	// A relative target that leaves the workspace on its way back in.
	_, _, err := sb.ReadFile(ctx, "back/f.txt", 1<<20)
	wantCode(t, "ReadFile back/f.txt", err, errcode.InvalidPath)
	wantCode(t, "WriteFile back/x", sb.WriteFile(ctx, "back/x", []byte("x"), 0o644), errcode.InvalidPath)
	// Nothing was written, made or removed through them.
	if got := runOK(t, sb, "sh", "-c", "cd data && ls -A"); got != "f.txt\nsub\n" {
		t.Errorf("data after the refused operations: got %q, want f.txt and sub only", got)
	}

	// Relative targets inside the workspace are followed.
	for _, p := range []string{"relf", "rel/f.txt", "chain/f.txt", "sub/up/f.txt", "chain/sub/../f.txt"} {
		got, _, err := sb.ReadFile(ctx, p, 1<<20)
		if err != nil || string(got) != "inside" {
			t.Errorf("ReadFile %s: got %q, %v, want %q, nil", p, got, err, "inside")
		}
	}
	write(t, sb, "rel/w.txt", []byte("through"), 0o644)
	write(t, sb, "sub/up/sub/w2.txt", []byte("through"), 0o644)
	if err := sb.Mkdir(ctx, "chain/m", false); err != nil {
		t.Errorf("Mkdir chain/m: %v", err)
	}
	if err := sb.Mkdir(ctx, "rel", true); err != nil {
		t.Errorf("Mkdir -p rel (a link to a directory): %v", err)
	}
	res := run(t, sb, runtime.ExecSpec{Argv: []string{"cat", "f.txt", "w.txt"}, Cwd: "sub/up"})
	if got := string(res.Stdout); got != "insidethrough" {
		t.Errorf("cat in sub/up: got %q, want %q", got, "insidethrough")
	}
	entries, err := sb.List(ctx, "rel/sub")
	if err != nil || len(entries) != 1 || entries[0].Name != "w2.txt" {
		t.Errorf("List rel/sub: got %+v, %v, want w2.txt", entries, err)
	}
	if err := sb.Remove(ctx, "chain/w.txt", false); err != nil {
		t.Errorf("Remove chain/w.txt: %v", err)
	}
	if got := runOK(t, sb, "sh", "-c", "cd data && ls -A"); got != "f.txt\nm\nsub\n" {
		t.Errorf("data after the operations through links: got %q, want f.txt, m and sub", got)
	}

	// A symlink as the last component of ls is the link itself, whatever
	// its target.
	for _, p := range []string{"abs", "absf", "rel", "chain", "sub/up", "back", "rel/../rel"} {
		wantLink(t, sb, p)
	}
}

// testSymlinkLoops: a loop of symlinks is invalid_path for every operation
// that has to go through it (ELOOP), never a runtime error; the links
// themselves can be listed and removed.
func testSymlinkLoops(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	runOK(t, sb, "sh", "-c", "ln -s a b && ln -s b a && ln -s self self && mkdir d && ln -s ../a d/a")
	for _, p := range []string{"a", "self", "d/a"} {
		_, _, err := sb.ReadFile(ctx, p, 1<<20)
		wantCode(t, "ReadFile "+p, err, errcode.InvalidPath)
		// Without parents an existing entry is already_exists, link or
		// not; with them it must be followed to be judged a directory.
		wantCode(t, "Mkdir "+p, sb.Mkdir(ctx, p, false), errcode.AlreadyExists)
		wantCode(t, "Mkdir -p "+p, sb.Mkdir(ctx, p, true), errcode.InvalidPath)
		_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: sh("pwd"), Cwd: p})
		wantCode(t, "Exec in "+p, err, errcode.InvalidPath)
		under := p + "/x"
		_, _, err = sb.ReadFile(ctx, under, 1<<20)
		wantCode(t, "ReadFile "+under, err, errcode.InvalidPath)
		wantCode(t, "WriteFile "+under, sb.WriteFile(ctx, under, []byte("x"), 0o644), errcode.InvalidPath)
		_, err = sb.List(ctx, under)
		wantCode(t, "List "+under, err, errcode.InvalidPath)
		wantCode(t, "Mkdir -p "+under, sb.Mkdir(ctx, under, true), errcode.InvalidPath)
		wantCode(t, "Remove "+under, sb.Remove(ctx, under, false), errcode.InvalidPath)
		wantCode(t, "Remove -r "+under, sb.Remove(ctx, under, true), errcode.InvalidPath)
		_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: sh("pwd"), Cwd: under})
		wantCode(t, "Exec in "+under, err, errcode.InvalidPath)
		wantLink(t, sb, p)
	}
	// Writing onto a looping link replaces it, as onto any link; removing
	// one removes the link.
	write(t, sb, "self", []byte("no longer a link"), 0o644)
	if got, _, err := sb.ReadFile(ctx, "self", 100); err != nil || string(got) != "no longer a link" {
		t.Errorf("ReadFile self after writing it: got %q, %v", got, err)
	}
	if err := sb.Remove(ctx, "d/a", false); err != nil {
		t.Errorf("Remove the link d/a: %v", err)
	}
	if got := runOK(t, sb, "sh", "-c", "ls -A d; test -L a && test -L b && echo links"); got != "links\n" {
		t.Errorf("after the removal: got %q, want d empty and a, b still links", got)
	}
}

// testLongNames: a name over 255 bytes, a path over 4,095 bytes and a
// symlink whose target holds a name over 255 bytes are invalid_path
// (ENAMETOOLONG) for every operation, never a runtime error.
func testLongNames(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	long := strings.Repeat("n", 300)
	runOK(t, sb, "sh", "-c", "mkdir d && ln -s "+long+" longlink && ln -s d/"+long+"/x longdir")
	for _, p := range []string{
		long, "d/" + long, runtime.DefaultWorkspaceRoot + "/" + long + "/f",
		strings.Repeat("abcdefghi/", 500), // 5,000 bytes
		"longlink", "longdir/y",
	} {
		what := func(op string) string { return fmt.Sprintf("%s %.40s... (%d bytes)", op, p, len(p)) }
		_, _, err := sb.ReadFile(ctx, p, 1<<20)
		wantCode(t, what("ReadFile"), err, errcode.InvalidPath)
		_, err = sb.List(ctx, p+"/x")
		wantCode(t, what("List"), err, errcode.InvalidPath)
		wantCode(t, what("Mkdir -p"), sb.Mkdir(ctx, p, true), errcode.InvalidPath)
		wantCode(t, what("Mkdir -p"), sb.Mkdir(ctx, p+"/x", true), errcode.InvalidPath)
		_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: sh("pwd"), Cwd: p})
		wantCode(t, what("Exec in"), err, errcode.InvalidPath)
		if p == "longlink" {
			// The link itself exists: mkdir without parents, writing
			// onto it or removing it does not follow it.
			wantCode(t, what("Mkdir"), sb.Mkdir(ctx, p, false), errcode.AlreadyExists)
			continue
		}
		wantCode(t, what("Mkdir"), sb.Mkdir(ctx, p, false), errcode.InvalidPath)
		wantCode(t, what("WriteFile"), sb.WriteFile(ctx, p, []byte("x"), 0o644), errcode.InvalidPath)
		wantCode(t, what("Remove"), sb.Remove(ctx, p, false), errcode.InvalidPath)
		wantCode(t, what("Remove -r"), sb.Remove(ctx, p, true), errcode.InvalidPath)
	}
	if got := runOK(t, sb, "sh", "-c", "ls -A d"); got != "" {
		t.Errorf("d after the refused operations: got %q, want it empty", got)
	}
}

// SeedArchive is what the import tests restore: directories (one without
// write permission), files with modes, an empty file and a symlink. A
// runtime's own tests may restore it too.
func SeedArchive(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range []struct {
		name, data, link string
		typ              byte
		mode             int64
	}{
		{name: "src/", typ: tar.TypeDir, mode: 0o755},
		{name: "src/main.py", typ: tar.TypeReg, mode: 0o644, data: "print(1)\n"},
		{name: "src/run.sh", typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\necho hi\n"},
		{name: "frozen/", typ: tar.TypeDir, mode: 0o555},
		{name: "frozen/f", typ: tar.TypeReg, mode: 0o444, data: "cold"},
		{name: "empty", typ: tar.TypeReg, mode: 0o600},
		{name: "link", typ: tar.TypeSymlink, mode: 0o777, link: "src/main.py"},
	} {
		h := &tar.Header{Name: m.name, Typeflag: m.typ, Mode: m.mode, Linkname: m.link, Size: int64(len(m.data)), ModTime: time.Now()}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// member is one archive member as the import tests compare it.
type member = TarMember

// workspace returns the workspace's members, as ExportWorkspace writes them.
func workspace(t *testing.T, sb runtime.Sandbox) map[string]member {
	t.Helper()
	var buf bytes.Buffer
	if _, err := sb.ExportWorkspace(t.Context(), &buf, nil); err != nil {
		t.Fatalf("ExportWorkspace: %v", err)
	}
	return TarMembers(t, buf.Bytes())
}

// wantMembers fails the test unless got and want hold the same members.
func wantMembers(t *testing.T, what string, got, want map[string]member) {
	t.Helper()
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s: member %s: got %+v (present %v), want %+v", what, name, g, ok, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: member %s: present, want it gone", what, name)
		}
	}
}

// testImportReadOnlyTree: a workspace holding a tree its user cannot empty
// (a 0555 directory with a file inside, as a command may leave it) is
// replaced whole: the workspace ends exactly equal to the archive, and a
// second import over the archive's own 0555 directory works too.
func testImportReadOnlyTree(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	runOK(t, sb, "sh", "-c", "mkdir -p ro/sub && echo x > ro/sub/f && echo y > ro/f && chmod 0555 ro/sub ro && echo keep > top")
	seed := SeedArchive(t)
	for i := range 2 {
		st, err := sb.ImportWorkspace(t.Context(), bytes.NewReader(seed), archive.Limits{})
		if err != nil {
			t.Fatalf("ImportWorkspace %d: %v", i+1, err)
		}
		if st.Members != 7 {
			t.Errorf("ImportWorkspace %d: got %d members, want 7", i+1, st.Members)
		}
		wantMembers(t, fmt.Sprintf("after import %d", i+1), workspace(t, sb), TarMembers(t, seed))
	}
	if got := runOK(t, sb, "cat", "link", "frozen/f"); got != "print(1)\ncold" {
		t.Errorf("cat link frozen/f: got %q", got)
	}
}

// Stager is implemented by sandboxes that can stage an import while the
// archive arrives (both of Paddock's): the node swaps it in with commit
// once the archive is whole and checked, or drops it with abort.
type Stager interface {
	StageWorkspace(ctx context.Context, r io.Reader, lim archive.Limits) (archive.Stats, func() error, func(), error)
}

// testStagedImport: an aborted stage, a hostile archive and an archive that
// breaks off leave the workspace exactly as it was; a committed stage
// replaces it; a stage is committed or aborted once.
func testStagedImport(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	stg, ok := sb.(Stager)
	if !ok {
		t.Skip("the sandbox does not stage imports")
	}
	ctx := t.Context()
	runOK(t, sb, "sh", "-c", "mkdir -p keep/d && echo k > keep/d/f && chmod 0555 keep/d")
	before := workspace(t, sb)
	seed := SeedArchive(t)

	_, commit, abort, err := stg.StageWorkspace(ctx, bytes.NewReader(seed), archive.Limits{})
	if err != nil {
		t.Fatalf("StageWorkspace: %v", err)
	}
	wantMembers(t, "while staged", workspace(t, sb), before)
	abort()
	if err := commit(); err == nil {
		t.Errorf("commit after abort: got nil, want an error")
	}
	wantMembers(t, "after abort", workspace(t, sb), before)

	var hostile bytes.Buffer
	tw := tar.NewWriter(&hostile)
	for _, name := range []string{"fine", "../evil"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = stg.StageWorkspace(ctx, bytes.NewReader(hostile.Bytes()), archive.Limits{})
	wantCode(t, "StageWorkspace of a hostile archive", err, errcode.InvalidArchive)
	_, _, _, err = stg.StageWorkspace(ctx, io.MultiReader(bytes.NewReader(seed[:1500]), failing{}), archive.Limits{})
	if err == nil {
		t.Errorf("StageWorkspace of an archive that breaks off: got nil error, want one")
	}
	wantMembers(t, "after failed stages", workspace(t, sb), before)

	_, commit, abort, err = stg.StageWorkspace(ctx, bytes.NewReader(seed), archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	abort() // after commit: nothing
	wantMembers(t, "after commit", workspace(t, sb), TarMembers(t, seed))
}

// failing fails every read, as a download that breaks off does.
type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func testWorkspaceRoot(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "/home/paddock/work")
	ctx := t.Context()
	write(t, sb, "/home/paddock/work/f.txt", []byte("custom"), 0o644)
	got, _, err := sb.ReadFile(ctx, "f.txt", 1<<20)
	if err != nil || string(got) != "custom" {
		t.Errorf("ReadFile f.txt: got %q, %v, want %q, nil", got, err, "custom")
	}
	_, _, err = sb.ReadFile(ctx, runtime.DefaultWorkspaceRoot+"/f.txt", 1<<20)
	wantCode(t, "ReadFile under the default root", err, errcode.InvalidPath)
	if out := runOK(t, sb, "cat", "f.txt"); out != "custom" {
		t.Errorf("cat f.txt: got %q, want %q", out, "custom")
	}
}

func testLifecycle(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	wantRunning := func(what string, want bool) {
		t.Helper()
		got, err := sb.Running(ctx)
		if err != nil || got != want {
			t.Errorf("Running %s: got %v, %v, want %v, nil", what, got, err, want)
		}
	}
	wantRunning("after Create", true)
	if err := sb.Start(ctx); err != nil {
		t.Errorf("Start while running: got %v, want nil", err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	wantRunning("after Stop", false)
	if err := sb.Stop(ctx); err != nil {
		t.Errorf("Stop while stopped: got %v, want nil", err)
	}
	_, err := sb.Exec(ctx, runtime.ExecSpec{Argv: sh("exit 0")})
	wantCode(t, "Exec while stopped", err, errcode.InvalidState)
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	wantRunning("after Start", true)
	if got := runOK(t, sb, "echo", "again"); got != "again\n" {
		t.Errorf("Exec after Start: got %q, want %q", got, "again\n")
	}
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	wantRunning("after Shutdown", false)
	if err := sb.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: got %v, want nil", err)
	}
	_, err = sb.Exec(ctx, runtime.ExecSpec{Argv: sh("exit 0")})
	wantCode(t, "Exec after Shutdown", err, errcode.InvalidState)
	wantCode(t, "Start after Shutdown", sb.Start(ctx), errcode.InvalidState)
}

func testStopKillsCommands(t *testing.T, s *suite) {
	sb := s.sandbox(t, nil, "")
	ctx := t.Context()
	type outcome struct {
		res runtime.ExecResult
		err error
	}
	done := make(chan outcome, 1)
	start := time.Now()
	go func() {
		res, err := sb.Exec(ctx, runtime.ExecSpec{Argv: sh("echo started > started; sleep 30")})
		done <- outcome{res, err}
	}()
	// Wait for the command to be running, polling with a deadline.
	for {
		if _, _, err := sb.ReadFile(ctx, "started", 1<<10); err == nil {
			break
		}
		select {
		case o := <-done:
			t.Fatalf("Exec returned before Stop: %+v, %v", o.res, o.err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(start) > bound {
			t.Fatalf("command did not start within %s", bound)
		}
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case o := <-done:
		if o.err == nil && o.res.ExitCode == 0 {
			t.Errorf("Exec interrupted by Stop: got exit code 0 and no error, want a failure")
		}
	case <-time.After(bound):
		t.Fatalf("Exec still running %s after Stop", bound)
	}
}
