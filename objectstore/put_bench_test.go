package objectstore_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/testenv"
)

// BenchmarkPut compares Store.Put (at most Window chunks unacknowledged,
// refused chunks sent again) with nats.go's ObjectStore.Put of the same
// 32 MiB, alternating, on a broker that syncs every write (the
// engine's default), 512 KiB chunks for both; each object is deleted
// after it is measured. Sub-benchmarks try other windows.
//
//	go test -run '^$' -bench BenchmarkPut -benchtime 20x -count 3 ./objectstore/
func BenchmarkPut(b *testing.B) {
	st, js := limitedStore(b, "")
	ctx := testenv.Context(b, 30*time.Minute)
	obs, err := js.ObjectStore(ctx, objectstore.DefaultBucket)
	if err != nil {
		b.Fatal(err)
	}
	const size = 32 << 20
	data := pattern(size)
	n := 0 // names are never reused: a deleted one stays taken
	for _, w := range []int{objectstore.Window, 8, 1} {
		b.Run(fmt.Sprintf("window=%d", w), func(b *testing.B) {
			ours := st.WithLimits(objectstore.PutLimits{Window: w})
			var raw, put []time.Duration
			for range b.N {
				n++
				name := fmt.Sprintf("raw-%d", n)
				t0 := time.Now()
				if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: objectstore.ChunkSize}}, bytes.NewReader(data)); err != nil {
					b.Fatal(err)
				}
				raw = append(raw, time.Since(t0))
				if err := st.Delete(ctx, name); err != nil {
					b.Fatal(err)
				}
				id := fmt.Sprintf("s%d", n)
				t0 = time.Now()
				if _, err := ours.Put(ctx, "bench", fmt.Sprintf("w%d", w), id, 1, bytes.NewReader(data), func() objectstore.Counts { return objectstore.Counts{} }); err != nil {
					b.Fatal(err)
				}
				put = append(put, time.Since(t0))
				if err := ours.DeleteSnapshot(ctx, "bench", fmt.Sprintf("w%d", w), id); err != nil {
					b.Fatal(err)
				}
			}
			p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[(len(d)-1)/2] }
			r, p := p50(raw), p50(put)
			b.ReportMetric(float64(size)/r.Seconds()/1e6, "raw-MB/s")
			b.ReportMetric(float64(size)/p.Seconds()/1e6, "put-MB/s")
			b.ReportMetric(r.Seconds()/p.Seconds(), "ratio")
		})
	}
}
