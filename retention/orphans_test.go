package retention_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/retention"
	"github.com/paddock-dev/paddock/testenv"
)

// killAfter is a reader that closes a connection once after bytes have
// been read from it: the writer of a put dies midway.
type killAfter struct {
	r     io.Reader
	after int
	n     int
	nc    *nats.Conn
}

func (k *killAfter) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	k.n += n
	if k.n >= k.after && !k.nc.IsClosed() {
		k.nc.Close()
	}
	return n, err
}

// TestSweepOrphans: a put whose connection dies after some chunks (its
// writer killed) leaves chunks no object names; UnnamedChunks gives their
// true size; once they are silent for the grace period a sweep removes
// them and reports that size, while a put still under way (writing a
// chunk every 50 ms) is left alone and finishes into an object that reads
// back whole.
func TestSweepOrphans(t *testing.T) {
	b := testenv.StartBroker(t)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 2*time.Minute)
	if _, err := objectstore.Ensure(ctx, js, objectstore.Config{}); err != nil {
		t.Fatal(err)
	}
	store, err := objectstore.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, objectstore.StreamName(objectstore.DefaultBucket))
	if err != nil {
		t.Fatal(err)
	}
	streamBytes := func() uint64 {
		t.Helper()
		si, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return si.State.Bytes
	}

	// The killed put, on a connection of its own.
	kc := testenv.Connect(t, b.ClientURL())
	killed, err := objectstore.Open(ctx, testenv.JetStream(t, kc), "")
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	if _, err := killed.Upload(ctx, "acme", "killed", &killAfter{r: bytes.NewReader(data), after: 6 << 20, nc: kc}); err == nil {
		t.Fatal("a put whose connection closed midway succeeded")
	}
	// Chunks the closed connection had sent may still land: wait until
	// what the stream holds is what UnnamedChunks counts.
	var orphan objectstore.Chunks
	testenv.Eventually(t, 30*time.Second, func() error {
		orphans, err := store.UnnamedChunks(ctx)
		if err != nil {
			return err
		}
		if len(orphans) != 1 || orphans[0].Msgs == 0 {
			return fmt.Errorf("unnamed chunks after a killed put: %+v, want one put's", orphans)
		}
		orphan = orphans[0]
		if held := streamBytes(); held < uint64(orphan.Bytes) || held > uint64(orphan.Bytes)+orphan.Msgs*256 {
			return fmt.Errorf("the stream holds %d bytes for orphan chunks of %d payload bytes", held, orphan.Bytes)
		}
		return nil
	})
	if want := int64(orphan.Msgs) * objectstore.ChunkSize; orphan.Bytes != want {
		t.Fatalf("orphan of %d full chunks: %d bytes, want %d", orphan.Msgs, orphan.Bytes, want)
	}

	// The orphan grows silent past the grace period.
	const grace = 5 * time.Second // well past a stall of the live put on a loaded machine
	testenv.Eventually(t, 10*time.Second, func() error {
		if since := time.Since(orphan.Last); since <= grace {
			return fmt.Errorf("the orphan was last written %s ago", since)
		}
		return nil
	})

	// A put under way: a chunk every 50 ms until the sweep is done.
	pr, pw := io.Pipe()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer pw.Close()
		for {
			if _, err := pw.Write(data[:objectstore.ChunkSize]); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond): // the pace of a slow put, not a synchronisation
			}
		}
	})
	var live string
	var liveErr error
	wg.Go(func() { live, liveErr = store.Upload(ctx, "acme", "live", pr) })
	testenv.Eventually(t, 30*time.Second, func() error {
		cs, err := store.UnnamedChunks(ctx)
		if err != nil || len(cs) < 2 {
			return fmt.Errorf("unnamed chunks %+v, %v: the live put has stored none yet", cs, err)
		}
		return nil
	})

	p := retention.Policy{TransferTTL: time.Hour, OrphanGrace: grace}
	dry, err := retention.SweepOrphans(ctx, store, p, true, nil)
	if err != nil || len(dry) != 1 || dry[0].Name != "chunks:"+orphan.NUID || dry[0].Size != orphan.Bytes {
		t.Fatalf("dry sweep: %+v, %v; want chunks:%s of %d bytes", dry, err, orphan.NUID, orphan.Bytes)
	}
	done, err := retention.SweepOrphans(ctx, store, p, false, nil)
	close(stop)
	wg.Wait()
	if err != nil || len(done) != 1 || done[0].Size != orphan.Bytes || done[0].Reason != retention.ReasonOrphanChunks {
		t.Fatalf("sweep: %+v, %v; want the orphan's %d bytes", done, err, orphan.Bytes)
	}
	if liveErr != nil {
		t.Fatalf("the put under way during the sweep: %v", liveErr)
	}
	if cs, err := store.UnnamedChunks(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("unnamed chunks after the sweep and the live put: %+v, %v; want none", cs, err)
	}
	h := sha256.New()
	n, err := store.Copy(ctx, live, h)
	if err != nil || n == 0 || n%objectstore.ChunkSize != 0 {
		t.Fatalf("the live put reads back %d bytes, %v", n, err)
	}
	if again, err := retention.SweepOrphans(ctx, store, p, false, nil); err != nil || len(again) != 0 {
		t.Fatalf("a second sweep: %+v, %v; want nothing", again, err)
	}
	if _, err := retention.SweepOrphans(ctx, store, retention.Policy{TransferTTL: time.Hour, OrphanGrace: -time.Second}, true, nil); err == nil {
		t.Fatal("a negative orphan grace was accepted")
	}
}
