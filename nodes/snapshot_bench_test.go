package nodes_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/archive"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/nodes/runtime/docker"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkSnapshot measures content-addressed snapshots against today's
// tar persist on one workspace of PADDOCK_BENCH_SNAPSHOT_MIB MiB (default
// 1024) in 10,000 files of random bytes, on the local runtime and on
// Docker with a loopfs disk (the node scans the workspace on the host):
//
//	persist-manifest  persist after changing 1 MiB of one file (five
//	                  per run, alternating with the next)
//	persist-manifest-full-scan  the same with dirty tracking off: the
//	                  node scans the whole workspace (before tracking)
//	persist-tar       a tar persist of the same workspace (then deleted)
//	restore-warm      hydrate of the newest manifest snapshot, every chunk
//	                  in the node's cache
//	restore-kept      the same on a node that keeps the tree an earlier
//	                  restore of it wrote: an overlay mount, no file written
//	                  (restore-warm and the others run with kept trees off)
//	restore-warm-tar  the same through a tar into the runtime's staging
//	                  (the path before restores wrote the host directory)
//	restore-cold      the same with the cache emptied first
//	raw-get           object store gets of the same chunks, 8 in flight,
//	                  each read to its end (what restore-cold fetches)
//
// Each reports its p50 (ms) and the runs alternate; b.N is the runs.
//
//	go test -run '^$' -bench BenchmarkSnapshot -benchtime 5x -timeout 60m ./nodes/
func BenchmarkSnapshot(b *testing.B) {
	mib := 1024
	if v := os.Getenv("PADDOCK_BENCH_SNAPSHOT_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			b.Fatalf("PADDOCK_BENCH_SNAPSHOT_MIB=%q", v)
		}
		mib = n
	}
	for _, kind := range []string{"local", "docker"} {
		b.Run(kind, func(b *testing.B) { benchSnapshot(b, kind, mib) })
	}
}

func benchSnapshot(b *testing.B, kind string, mib int) {
	ctx := context.Background()
	lim := archive.Limits{MaxArchiveBytes: 64 << 30, MaxExtractedBytes: 64 << 30, MaxMembers: 1_000_000}
	cacheDir := b.TempDir()
	node := "snapbench-" + uuid.NewString()[:8]
	cfg := nodes.Config{ID: node, ChunkCacheDir: cacheDir, ArchiveLimits: lim, TreeCacheDir: b.TempDir(), TreeCacheBytes: int64(mib) << 21}
	opts := testenv.StackOptions{Node: cfg}
	var drt *docker.Runtime
	image := ""
	if kind == "docker" {
		image = testenv.SandboxBaseImage(b)
		var err error
		drt, err = docker.New(docker.Config{Client: testenv.DockerClient(b), Node: node, DiskDir: testenv.DiskDir(b), DefaultDiskBytes: int64(mib)<<20*4 + 1<<30})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { testenv.RemoveContainers(b, testenv.DockerClient(b), docker.LabelNode+"="+node) })
		opts.Runtimes = []runtime.Runtime{drt}
	}
	st := testenv.StartStack(b, opts)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: kind, Image: image})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Client.Shutdown(context.Background(), s.SessionID) })
	var dir string
	if kind == "local" {
		dir = st.Local.WorkspaceDir("default", s.SessionID)
	} else {
		found, err := drt.FindSandboxes(ctx)
		if err != nil || len(found) != 1 {
			b.Fatalf("find the sandbox: %d, %v", len(found), err)
		}
		h, ok := found[0].Sandbox.(runtime.HostWorkspace)
		if dir, ok = h.HostWorkspaceDir(); !ok {
			b.Fatal("the Docker sandbox has no host workspace: no loopfs disk on this host")
		}
	}
	const files = 10_000
	size := mib << 20 / files
	buf := make([]byte, size)
	for i := range files {
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
	big := filepath.Join(dir, "big.bin") // the file whose 1 MiB changes
	chunk := make([]byte, 1<<20)
	_, _ = rand.Read(chunk)
	if err := os.WriteFile(big, append(slices.Clone(chunk), chunk[:1<<19]...), 0o644); err != nil {
		b.Fatal(err)
	}
	if _, err := st.Client.Persist(ctx, s.SessionID); err != nil { // the first upload, untimed
		b.Fatal(err)
	}
	store, err := objectstore.Open(ctx, st.JS, "")
	if err != nil {
		b.Fatal(err)
	}
	var manifest, fullScan, tar, warm, kept, warmTar, cold, raw []time.Duration
	var last commands.Snapshot
	var chunks map[string]int64
	for i := 0; i < b.N; i++ {
		// (a) 1 MiB changed, then a manifest persist, with dirty
		// tracking and without, alternating.
		for j := range 10 {
			_, _ = rand.Read(chunk)
			f, err := os.OpenFile(big, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			_, err = f.WriteAt(chunk, 0)
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			tracked := j%2 == 0
			nodes.SetDirtyTracking(st.Agent, tracked)
			t0 := time.Now()
			last, err = st.Client.Persist(ctx, s.SessionID)
			if tracked {
				manifest = append(manifest, time.Since(t0))
			} else {
				fullScan = append(fullScan, time.Since(t0))
			}
			nodes.SetDirtyTracking(st.Agent, true)
			if err != nil {
				b.Fatal(err)
			}
			d := lastData[events.SnapshotFinish](b, st, s.SessionID)
			if d.Chunks == nil || d.Chunks.Uploaded != 1 {
				b.Fatalf("manifest persist uploaded %+v; want 1 chunk", d.Chunks)
			}
		}
		// (b) a tar persist of the same workspace.
		nodes.SetSnapshotFormat(st.Agent, nodes.SnapshotsTar)
		t0 := time.Now()
		ts, err := st.Client.Persist(ctx, s.SessionID)
		tar = append(tar, time.Since(t0))
		nodes.SetSnapshotFormat(st.Agent, nodes.SnapshotsManifest)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.DeleteSnapshot(ctx, "default", s.SessionID, ts.ID); err != nil {
			b.Fatal(err)
		}
		// The tar is now the newest snapshot: a persist makes the
		// manifest the newest again (nothing uploaded) for the hydrates.
		if last, err = st.Client.Persist(ctx, s.SessionID); err != nil {
			b.Fatal(err)
		}
		// (c) restore with the cache warm (a first restore fills it).
		nodes.SetKeptTrees(st.Agent, false)
		if i == 0 {
			if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: last.ID}); err != nil {
				b.Fatal(err)
			}
		}
		t0 = time.Now()
		_, err = st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: last.ID})
		warm = append(warm, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		// (c'') the same from a kept tree (a first restore writes it: each
		// run's snapshot is a new one).
		nodes.SetKeptTrees(st.Agent, true)
		if _, err := st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: last.ID}); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		_, err = st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: last.ID})
		kept = append(kept, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		if h := lastData[events.HydrateFinish](b, st, s.SessionID); h.Chunks == nil || !h.Chunks.Kept {
			b.Fatalf("restore from a kept tree: chunks %+v; want kept", h.Chunks)
		}
		nodes.SetKeptTrees(st.Agent, false)
		// (c') the same through a tar into the runtime's staging, as
		// before restores wrote the host directory.
		nodes.SetTarRestore(st.Agent, true)
		t0 = time.Now()
		_, err = st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: last.ID})
		warmTar = append(warmTar, time.Since(t0))
		nodes.SetTarRestore(st.Agent, false)
		if err != nil {
			b.Fatal(err)
		}
		// (d) restore with the cache empty.
		if err := os.RemoveAll(filepath.Join(cacheDir, "default")); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		_, err = st.Client.Hydrate(ctx, s.SessionID, commands.HydrateArgs{SnapshotID: last.ID})
		cold = append(cold, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		h := lastData[events.HydrateFinish](b, st, s.SessionID)
		if h.Chunks == nil || h.Chunks.Cached != 0 {
			b.Fatalf("cold restore chunks %+v; want none from the cache", h.Chunks)
		}
		// (e) raw gets of the same chunks.
		if chunks == nil {
			m, _, err := store.GetManifest(ctx, "default", s.SessionID, last.ID, snapshot.Limits{})
			if err != nil {
				b.Fatal(err)
			}
			chunks = m.ChunkSet()
		}
		t0 = time.Now()
		if err := rawChunkGets(ctx, st, chunks); err != nil {
			b.Fatal(err)
		}
		raw = append(raw, time.Since(t0))
	}
	b.StopTimer()
	p50 := testenv.P50Millis
	b.ReportMetric(p50(manifest), "persist-manifest-p50-ms")
	b.ReportMetric(p50(fullScan), "persist-manifest-full-scan-p50-ms")
	b.ReportMetric(p50(tar), "persist-tar-p50-ms")
	b.ReportMetric(p50(warm), "restore-warm-p50-ms")
	b.ReportMetric(p50(kept), "restore-kept-p50-ms")
	b.ReportMetric(p50(warmTar), "restore-warm-tar-p50-ms")
	b.ReportMetric(p50(cold), "restore-cold-p50-ms")
	b.ReportMetric(p50(raw), "raw-get-p50-ms")
	b.ReportMetric(float64(mib), "MiB")
}

// rawChunkGets reads every chunk object to its end through the object
// store API, 8 at a time.
func rawChunkGets(ctx context.Context, st *testenv.Stack, chunks map[string]int64) error {
	obs, err := st.JS.ObjectStore(ctx, objectstore.DefaultBucket)
	if err != nil {
		return err
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for d := range chunks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			name, err := objectstore.ChunkName("default", d)
			if err == nil {
				var r jetstream.ObjectResult
				if r, err = obs.Get(ctx, name); err == nil {
					_, err = io.Copy(io.Discard, r)
					r.Close()
				}
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// lastData decodes the data of the session's last event (an op's finish:
// the calls are synchronous).
func lastData[T any](b *testing.B, st *testenv.Stack, id string) T {
	b.Helper()
	evs, err := st.Log.Session(context.Background(), "default", id)
	if err != nil {
		b.Fatal(err)
	}
	d, err := events.DecodeData[T](evs[len(evs)-1])
	if err != nil {
		b.Fatal(err)
	}
	return d
}
