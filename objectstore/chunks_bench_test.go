package objectstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/snapshot"
	"github.com/paddock-dev/paddock/testenv"
)

// benchChunks is how many 1 MiB chunks the chunk benchmarks move.
const benchChunks = 32

// freshChunks returns benchChunks distinct, incompressible 1 MiB chunks
// that no earlier round made (round is stamped into each), their digests
// and their concatenation.
func freshChunks(base []byte, round int) ([][]byte, []string, []byte) {
	all := bytes.Clone(base)
	chunks := make([][]byte, benchChunks)
	digests := make([]string, benchChunks)
	for i := range chunks {
		c := all[i*snapshot.ChunkSize : (i+1)*snapshot.ChunkSize]
		binary.LittleEndian.PutUint64(c, uint64(round))
		binary.LittleEndian.PutUint64(c[8:], uint64(i))
		chunks[i], digests[i] = c, digestOf(c)
	}
	return chunks, digests, all
}

func p50(d []time.Duration) time.Duration { slices.Sort(d); return d[(len(d)-1)/2] }

// BenchmarkChunkUpload compares an Uploader storing 32 fresh 1 MiB chunks
// (32 objects, `parallel` puts in flight) with Store.Put of the same 32
// MiB as one object, alternating in the same run; everything is deleted
// after it is measured.
//
//	go test -run '^$' -bench BenchmarkChunkUpload -benchtime 10x ./objectstore/
func BenchmarkChunkUpload(b *testing.B) {
	st, _ := limitedStore(b, "")
	ctx := testenv.Context(b, 30*time.Minute)
	base := pattern(benchChunks * snapshot.ChunkSize)
	round := 0
	for _, par := range []int{1, 4, 8, 16} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) {
			var raw, up []time.Duration
			for range b.N {
				round++
				chunks, digests, all := freshChunks(base, round)
				id := fmt.Sprintf("r%d", round)
				t0 := time.Now()
				if _, err := st.Put(ctx, "bench", "plain", id, 1, bytes.NewReader(all), func() objectstore.Counts { return objectstore.Counts{} }); err != nil {
					b.Fatal(err)
				}
				raw = append(raw, time.Since(t0))
				if err := st.DeleteSnapshot(ctx, "bench", "plain", id); err != nil {
					b.Fatal(err)
				}
				t0 = time.Now()
				u := st.Uploader(ctx, "bench", par)
				for i, c := range chunks {
					if err := u.Put(digests[i], c); err != nil {
						b.Fatal(err)
					}
				}
				stats, err := u.Wait()
				if err != nil || stats.Uploaded != benchChunks {
					b.Fatalf("upload: %+v, %v", stats, err)
				}
				up = append(up, time.Since(t0))
				dropChunks(b, ctx, st, digests)
			}
			size := float64(benchChunks * snapshot.ChunkSize)
			r, u := p50(raw), p50(up)
			b.ReportMetric(size/r.Seconds()/1e6, "put-MB/s")
			b.ReportMetric(size/u.Seconds()/1e6, "chunks-MB/s")
			b.ReportMetric(r.Seconds()/u.Seconds(), "ratio")
		})
	}
}

func dropChunks(b *testing.B, ctx context.Context, st *objectstore.Store, digests []string) {
	b.Helper()
	for _, d := range digests {
		if _, err := st.DeleteChunk(ctx, "bench", d, time.Now().Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChunkGet compares GetChunk of 32 stored 1 MiB chunks
// (`parallel` gets in flight) with one streamed get (Store.Copy) of the
// same 32 MiB stored as one object, alternating in the same run: the
// cold restore's fetch against the raw object store.
//
//	go test -run '^$' -bench BenchmarkChunkGet -benchtime 20x ./objectstore/
func BenchmarkChunkGet(b *testing.B) {
	st, _ := limitedStore(b, "")
	ctx := testenv.Context(b, 30*time.Minute)
	chunks, digests, all := freshChunks(pattern(benchChunks*snapshot.ChunkSize), 0)
	u := st.Uploader(ctx, "bench", 8)
	for i, c := range chunks {
		if err := u.Put(digests[i], c); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := u.Wait(); err != nil {
		b.Fatal(err)
	}
	if _, err := st.Put(ctx, "bench", "plain", "whole", 1, bytes.NewReader(all), func() objectstore.Counts { return objectstore.Counts{} }); err != nil {
		b.Fatal(err)
	}
	name, _ := objectstore.SnapshotName("bench", "plain", "whole")
	for _, par := range []int{1, 4, 8, 16} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) {
			var raw, got []time.Duration
			for range b.N {
				t0 := time.Now()
				if n, err := st.Copy(ctx, name, io.Discard); err != nil || n != int64(len(all)) {
					b.Fatalf("get: %d, %v", n, err)
				}
				raw = append(raw, time.Since(t0))
				t0 = time.Now()
				if err := getAll(ctx, st, digests, par); err != nil {
					b.Fatal(err)
				}
				got = append(got, time.Since(t0))
			}
			size := float64(len(all))
			r, g := p50(raw), p50(got)
			b.ReportMetric(size/r.Seconds()/1e6, "get-MB/s")
			b.ReportMetric(size/g.Seconds()/1e6, "chunks-MB/s")
			b.ReportMetric(r.Seconds()/g.Seconds(), "ratio")
		})
	}
}

// getAll gets every chunk with par gets in flight.
func getAll(ctx context.Context, st *objectstore.Store, digests []string, par int) error {
	next := make(chan string)
	errs := make(chan error, par)
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for d := range next {
				if _, err := st.GetChunk(ctx, "bench", d); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for _, d := range digests {
		select {
		case next <- d:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}
