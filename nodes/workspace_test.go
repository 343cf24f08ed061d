package nodes_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	cryptorand "crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/nodes/runtime/local"
	"github.com/paddock-dev/paddock/testenv"
)

// runtimeKind makes a runtime of one kind for a node, for tests that run
// on both.
type runtimeKind struct {
	name  string
	image func(t *testing.T) string
	make  func(t *testing.T, node string) runtime.Runtime
}

func runtimeKinds() []runtimeKind {
	return []runtimeKind{
		{"local", func(*testing.T) string { return "" }, func(t *testing.T, _ string) runtime.Runtime {
			rt, err := local.New(local.Config{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			// Before the directory goes: what restores from kept trees
			// mounted in it (sandboxes a test leaves) is unmounted.
			t.Cleanup(func() {
				if err := rt.Close(); err != nil {
					t.Error(err)
				}
			})
			return rt
		}},
		{"docker", func(t *testing.T) string { return testenv.SandboxBaseImage(t) }, func(t *testing.T, node string) runtime.Runtime {
			return dockerRuntime(t, node)
		}},
	}
}

// treeScript lists every path of the workspace with its type, mode, size,
// link target and content digest, one line each, sorted.
const treeScript = `find . -mindepth 1 | sort | while read -r p; do
  if [ -L "$p" ]; then echo "$p link $(readlink "$p")";
  elif [ -d "$p" ]; then echo "$p dir $(stat -c %a "$p")";
  else echo "$p file $(stat -c '%a %s' "$p") $(sha256sum < "$p" | cut -c1-16)"; fi
done`

func tree(t *testing.T, st *testenv.Stack, id string) string {
	t.Helper()
	res, err := st.Client.Exec(testenv.Context(t, 5*time.Minute), id, commands.ExecArgs{Shell: treeScript, MaxOutputBytes: commands.MaxOutputBytes})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("tree: %+v, %v", res, err)
	}
	return string(res.Stdout)
}

// TestWorkspaceRoundTrip: files (one of 200 MiB), nested directories,
// empty files, executable modes and internal symlinks survive persist →
// shutdown → resume byte for byte, on both runtimes; a second resume of
// the running session restores nothing.
func TestWorkspaceRoundTrip(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			image := k.image(t)
			node := "ws-" + uuid.NewString()[:8]
			st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{ID: node}, Runtimes: []runtime.Runtime{k.make(t, node)}})
			ctx := testenv.Context(t, 5*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			setup := `mkdir -p a/b/c && echo deep > a/b/c/deep.txt && : > empty && printf '#!/bin/sh\necho hi\n' > run.sh && chmod 755 run.sh && chmod 600 empty && ln -s a/b/c/deep.txt link && head -c 209715200 /dev/urandom > big.bin`
			if res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: setup}); err != nil || res.ExitCode != 0 {
				t.Fatalf("setup: %+v, %v", res, err)
			}
			before := tree(t, st, s.SessionID)
			if !strings.Contains(before, "./big.bin file 644 209715200") || !strings.Contains(before, "./link link a/b/c/deep.txt") {
				t.Fatalf("setup tree:\n%s", before)
			}
			snap, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Members != 8 || snap.Bytes < 209715200 || len(snap.SHA256) != 64 || snap.Seq != 7 { // create, setup exec, tree exec, then persist starts at seq 7
				t.Fatalf("snapshot = %+v", snap)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			res, err := st.Client.Resume(ctx, s.SessionID, nil)
			if err != nil || !res.Restored || res.Epoch != 2 || res.SnapshotID != snap.ID {
				t.Fatalf("resume after shutdown = %+v, %v; want restored at epoch 2", res, err)
			}
			if after := tree(t, st, s.SessionID); after != before {
				t.Fatalf("workspace after resume:\n%s\nwant:\n%s", after, before)
			}
			// Persist again so that the snapshot matches the running
			// workspace: a resume now restores nothing.
			if _, err := st.Client.Persist(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			res, err = st.Client.Resume(ctx, s.SessionID, nil)
			if err != nil || res.Restored {
				t.Fatalf("resume of a matching running session = %+v, %v; want nothing restored", res, err)
			}
			evs, err := st.Log.Session(ctx, "default", s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			last := evs[len(evs)-1]
			var d struct{ Restored bool }
			if last.Op != "resume" || last.Phase != events.PhaseFinish || json.Unmarshal(last.Data, &d) != nil || d.Restored {
				t.Fatalf("last event = %s %s %s; want a resume finish that restored nothing", last.Op, last.Phase, last.Data)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			checkHashChain(t, st.Log, "default", s.SessionID)
		})
	}
}

// TestResumeOnAnotherNode: a session persisted on node A is resumed on
// node B after A left, with its workspace and its secrets (given again).
func TestResumeOnAnotherNode(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			image := k.image(t)
			st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
			ctx := testenv.Context(t, 3*time.Minute)
			nodeA, nodeB := "a-"+uuid.NewString()[:8], "b-"+uuid.NewString()[:8]
			rtA := k.make(t, nodeA)
			a := startAgent(t, st, nodes.Config{ID: nodeA}, rtA)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image, SecretEnv: map[string]string{"TOKEN": "tok-123"}})
			if err != nil || s.Node != nodeA {
				t.Fatalf("create = %+v, %v", s, err)
			}
			if _, err := st.Client.WriteFile(ctx, s.SessionID, "work/notes.md", []byte("# progress\n"), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := st.Client.Stop(ctx, s.SessionID); err != nil { // stop persists
				t.Fatal(err)
			}
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			startAgent(t, st, nodes.Config{ID: nodeB}, k.make(t, nodeB))
			testenv.Eventually(t, 30*time.Second, func() error {
				for _, n := range st.Scheduler.Nodes() {
					if n.Node == nodeB {
						return nil
					}
				}
				return errors.New("node B not registered yet")
			})
			res, err := st.Client.Resume(ctx, s.SessionID, map[string]string{"TOKEN": "tok-123"})
			if err != nil || res.Node != nodeB || !res.Restored || res.Epoch != 2 {
				t.Fatalf("resume = %+v, %v; want restored on %s at epoch 2", res, err, nodeB)
			}
			got, err := st.Client.ReadFile(ctx, s.SessionID, "work/notes.md")
			if err != nil || string(got) != "# progress\n" {
				t.Fatalf("notes on node B = %q, %v", got, err)
			}
			out, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: `echo "$TOKEN"`})
			if err != nil || string(out.Stdout) != "[REDACTED]\n" {
				t.Fatalf("secret on node B = %q, %v; want it set and redacted", out.Stdout, err)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
			checkHashChain(t, st.Log, "default", s.SessionID)
			// Node A's stopped sandbox is its own to reap; remove it here,
			// with its disk.
			if d, ok := rtA.(*docker.Runtime); ok {
				found, err := d.FindSandboxes(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, fd := range found {
					if err := fd.Sandbox.Shutdown(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// TestHydrateBadArchives: hostile archives and bad snapshots are refused
// with their codes on both runtimes, and the workspace is left as it was.
func TestHydrateBadArchives(t *testing.T) {
	type member struct {
		name, link string
		typ        byte
		data       string
	}
	tarOf := func(ms ...member) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, m := range ms {
			h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: m.typ, Mode: 0o644}
			if m.typ == tar.TypeReg {
				h.Size = int64(len(m.data))
			}
			_ = tw.WriteHeader(h)
			_, _ = tw.Write([]byte(m.data))
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	bad := map[string][]byte{
		"dotdot":         tarOf(member{name: "../evil", typ: tar.TypeReg, data: "x"}),
		"absolute":       tarOf(member{name: "/tmp/evil", typ: tar.TypeReg, data: "x"}),
		"symlink out":    tarOf(member{name: "l", typ: tar.TypeSymlink, link: "../../../tmp"}, member{name: "l/evil", typ: tar.TypeReg, data: "x"}),
		"hardlink out":   tarOf(member{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}),
		"under symlink":  tarOf(member{name: "d", typ: tar.TypeDir}, member{name: "l", typ: tar.TypeSymlink, link: "d"}, member{name: "l/x", typ: tar.TypeReg, data: "x"}),
		"device":         tarOf(member{name: "null", typ: tar.TypeChar}),
		"not a tar":      []byte("this is not an archive at all, just some bytes that go on and on"),
		"too many files": tarOf(member{name: "1", typ: tar.TypeReg}, member{name: "2", typ: tar.TypeReg}, member{name: "3", typ: tar.TypeReg}, member{name: "4", typ: tar.TypeReg}),
		"over the size":  tarOf(member{name: "big", typ: tar.TypeReg, data: strings.Repeat("0", 4096)}),
		// 64 MiB of zeros, zstd-compressed to a few KiB.
		"zstd bomb": zstdOf(t, tarOf(member{name: "big", typ: tar.TypeReg, data: strings.Repeat("\x00", 64<<20)})),
		"bad zstd":  append([]byte{0x28, 0xb5, 0x2f, 0xfd}, []byte("not really zstd after the magic")...),
	}
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			image := k.image(t)
			node := "hy-" + uuid.NewString()[:8]
			cfg := nodes.Config{ID: node}
			cfg.ArchiveLimits.MaxMembers, cfg.ArchiveLimits.MaxExtractedBytes = 3, 1024
			st := testenv.StartStack(t, testenv.StackOptions{Node: cfg, Runtimes: []runtime.Runtime{k.make(t, node)}})
			ctx := testenv.Context(t, 3*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Client.WriteFile(ctx, s.SessionID, "keep.txt", []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			for name, data := range bad {
				_, err := st.Client.HydrateFrom(ctx, s.SessionID, bytes.NewReader(data))
				if errcode.Of(err) != errcode.InvalidArchive {
					t.Errorf("%s: got %v, want invalid_archive", name, err)
				}
			}
			_, err = st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: uuid.NewString()})
			if errcode.Of(err) != errcode.SnapshotNotFound {
				t.Errorf("unknown snapshot: got %v, want snapshot_not_found", err)
			}
			// A snapshot whose stored bytes no longer match their digest.
			snap, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			obs, err := st.JS.ObjectStore(ctx, "sbx_workspaces")
			if err != nil {
				t.Fatal(err)
			}
			info, err := obs.GetInfo(ctx, snap.Name)
			if err != nil {
				t.Fatal(err)
			}
			meta := info.ObjectMeta
			meta.Metadata["stored_sha256"] = strings.Repeat("0", 64)
			if err := obs.UpdateMeta(ctx, snap.Name, meta); err != nil {
				t.Fatal(err)
			}
			_, err = st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: snap.ID})
			if errcode.Of(err) != errcode.SnapshotCorrupt {
				t.Errorf("corrupt snapshot: got %v, want snapshot_corrupt", err)
			}
			got, err := st.Client.ReadFile(ctx, s.SessionID, "keep.txt")
			if err != nil || string(got) != "keep" {
				t.Fatalf("workspace after refused hydrates: %q, %v", got, err)
			}
			res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "ls -A; test ! -e /tmp/evil"})
			if err != nil || string(res.Stdout) != "keep.txt\n" || res.ExitCode != 0 {
				t.Fatalf("workspace holds %q, exit %d (%v); want only keep.txt and no /tmp/evil", res.Stdout, res.ExitCode, err)
			}
			// A good archive replaces the workspace.
			var good bytes.Buffer // gzip, as tar -czf makes it
			gz := gzip.NewWriter(&good)
			_, _ = gz.Write(tarOf(member{name: "src/", typ: tar.TypeDir}, member{name: "src/main.py", typ: tar.TypeReg, data: "print(1)\n"}))
			_ = gz.Close()
			if hr, err := st.Client.HydrateFrom(ctx, s.SessionID, bytes.NewReader(good.Bytes())); err != nil || hr.Members != 2 {
				t.Fatalf("good hydrate = %+v, %v", hr, err)
			}
			if got, err := st.Client.ReadFile(ctx, s.SessionID, "src/main.py"); err != nil || string(got) != "print(1)\n" {
				t.Fatalf("after good hydrate: %q, %v", got, err)
			}
			if _, err := st.Client.ReadFile(ctx, s.SessionID, "keep.txt"); errcode.Of(err) != errcode.NotFound {
				t.Fatalf("keep.txt after hydrate: %v, want not_found (replaced)", err)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLargeFiles: files over the inline limit are written and read
// through the workspace bucket, byte for byte, on both runtimes, and no
// temporary object is left behind.
func TestLargeFiles(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			image := k.image(t)
			node := "lf-" + uuid.NewString()[:8]
			st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{ID: node}, Runtimes: []runtime.Runtime{k.make(t, node)}})
			ctx := testenv.Context(t, 3*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image})
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 3<<20+17)
			_, _ = cryptorand.Read(data)
			wr, err := st.Client.WriteFile(ctx, s.SessionID, "big/blob.bin", data, 0o600)
			if err != nil || wr.Size != int64(len(data)) {
				t.Fatalf("write = %+v, %v", wr, err)
			}
			got, err := st.Client.ReadFile(ctx, s.SessionID, "big/blob.bin")
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (%v), want the %d written", len(got), err, len(data))
			}
			res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "stat -c '%s %a' big/blob.bin"})
			if err != nil || string(res.Stdout) != "3145745 600\n" {
				t.Fatalf("in the sandbox: %q, %v", res.Stdout, err)
			}
			obs, err := st.JS.ObjectStore(ctx, "sbx_workspaces")
			if err != nil {
				t.Fatal(err)
			}
			if list, err := obs.List(ctx); err == nil && len(list) > 0 {
				t.Fatalf("%d temporary objects left, first %s", len(list), list[0].Name)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestManifest: a create materialises its manifest; ephemeral entries are
// never persisted; the create event records the manifest without content.
func TestManifest(t *testing.T) {
	for _, k := range runtimeKinds() {
		t.Run(k.name, func(t *testing.T) {
			image := k.image(t)
			node := "mf-" + uuid.NewString()[:8]
			st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{ID: node}, Runtimes: []runtime.Runtime{k.make(t, node)}})
			ctx := testenv.Context(t, 3*time.Minute)
			s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image, Manifest: []commands.ManifestEntry{
				{Path: "src", Dir: true},
				{Path: "src/app.py", Content: []byte("print('app')\n"), Mode: 0o755},
				{Path: "creds/.env", Content: []byte("API_KEY=manifest-secret\n"), Mode: 0o600, Ephemeral: true},
			}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "stat -c '%n %a' src/app.py creds/.env"})
			if err != nil || string(res.Stdout) != "src/app.py 755\ncreds/.env 600\n" {
				t.Fatalf("materialised: %q, %v", res.Stdout, err)
			}
			snap, err := st.Client.Persist(ctx, s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			// src/, src/app.py, creds/ — never creds/.env.
			if snap.Members != 3 {
				t.Fatalf("snapshot has %d members, want 3 (the ephemeral file left out)", snap.Members)
			}
			evs, err := st.Log.Session(ctx, "default", s.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(evs[0].Data), "manifest-secret") || !strings.Contains(string(evs[0].Data), `"ephemeral":true`) {
				t.Fatalf("create event data = %s; want the manifest recorded without content", evs[0].Data)
			}
			_, err = st.Client.Create(ctx, commands.CreateArgs{Runtime: k.name, Image: image, Manifest: []commands.ManifestEntry{{Path: "../escape", Content: []byte("x")}}})
			if errcode.Of(err) != errcode.InvalidPath {
				t.Fatalf("manifest escaping the workspace: %v, want invalid_path", err)
			}
			if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func zstdOf(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = enc.Write(data)
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestZstdSnapshots: a node that compresses its snapshots writes tar+zstd
// ones, which resume restores byte for byte; a compressible workspace
// stores far smaller than it is.
func TestZstdSnapshots(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{Node: nodes.Config{ID: "z1", CompressSnapshots: true}})
	ctx := testenv.Context(t, 2*time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		t.Fatal(err)
	}
	text := []byte(strings.Repeat("func main() { fmt.Println(\"hello, paddock\") }\n", 20000))
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "src/main.go", text, 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := st.Client.Persist(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Format != "tar+zstd" || snap.Size*10 > int64(len(text)) || snap.StoredSHA256 == snap.SHA256 {
		t.Fatalf("snapshot = %+v; want tar+zstd, stored at under a tenth of %d bytes", snap, len(text))
	}
	if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Client.Resume(ctx, s.SessionID, nil); err != nil || !res.Restored {
		t.Fatalf("resume = %+v, %v", res, err)
	}
	got, err := st.Client.ReadFile(ctx, s.SessionID, "src/main.go")
	if err != nil || !bytes.Equal(got, text) {
		t.Fatalf("after resume: %d bytes, %v", len(got), err)
	}
}
