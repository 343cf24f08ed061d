package nodes_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkWorkspace compares persist and hydrate of a 100 MiB workspace
// of 10,000 files of random bytes (local runtime, whole path through NATS)
// with the raw pipeline: `tar` of the same tree to a local file plus an
// object store put, and an object store get plus `tar -x`. Alternating,
// same broker; with plain tar snapshots (the default) and zstd ones.
//
//	go test -run '^$' -bench BenchmarkWorkspace -benchtime 3x ./nodes/
func BenchmarkWorkspace(b *testing.B) {
	if _, err := exec.LookPath("tar"); err != nil {
		b.Skip("no tar on PATH")
	}
	for _, snaps := range []string{"uncompressed", "zstd"} {
		b.Run(snaps, func(b *testing.B) { benchWorkspace(b, snaps == "zstd") })
	}
}

func benchWorkspace(b *testing.B, compress bool) {
	st := testenv.StartStack(b, testenv.StackOptions{Node: nodes.Config{ID: "node-1", CompressSnapshots: compress}})
	ctx := context.Background()
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local"})
	if err != nil {
		b.Fatal(err)
	}
	dir := st.Local.WorkspaceDir("default", s.SessionID)
	const files, size = 10_000, 100 << 20 / 10_000
	buf := make([]byte, size)
	for i := 0; i < files; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		_, _ = rand.Read(buf)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", i%100)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	obs, err := st.JS.ObjectStore(ctx, objectstore.DefaultBucket)
	if err != nil {
		b.Fatal(err)
	}
	tmp := b.TempDir()
	rawPut := func() (func(), error) {
		f := filepath.Join(tmp, "raw.tar")
		if out, err := exec.Command("tar", "-cf", f, "-C", dir, ".").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("tar: %v: %s", err, out)
		}
		r, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		_, err = obs.Put(ctx, jetstream.ObjectMeta{Name: "raw/" + uuid.NewString(), Opts: &jetstream.ObjectMetaOptions{ChunkSize: objectstore.ChunkSize}}, r)
		return nil, err
	}
	var lastSnap string
	persist := func() (func(), error) {
		snap, err := st.Client.Persist(ctx, s.SessionID)
		lastSnap = snap.ID
		return nil, err
	}
	b.Run("persist", func(b *testing.B) {
		measurePair(b, rawPut, persist)
		b.ReportMetric(100/1.0, "MiB")
	})
	rawName := "raw/get"
	if f, err := os.Open(filepath.Join(tmp, "raw.tar")); err == nil {
		_, err = obs.Put(ctx, jetstream.ObjectMeta{Name: rawName, Opts: &jetstream.ObjectMetaOptions{ChunkSize: objectstore.ChunkSize}}, f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	rawGet := func() (func(), error) {
		f := filepath.Join(tmp, "get.tar")
		if err := obs.GetFile(ctx, rawName, f); err != nil {
			return nil, err
		}
		out := filepath.Join(tmp, "out-"+uuid.NewString())
		if err := os.Mkdir(out, 0o755); err != nil {
			return nil, err
		}
		if o, err := exec.Command("tar", "-xf", f, "-C", out).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("tar -x: %v: %s", err, o)
		}
		return func() { _ = os.RemoveAll(out) }, nil
	}
	hydrate := func() (func(), error) {
		_, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: lastSnap})
		return nil, err
	}
	b.Run("hydrate", func(b *testing.B) {
		measurePair(b, rawGet, hydrate)
	})
}
