package objectstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/broker"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/testenv"
)

// limitedStore starts a broker whose streams take at most maxBuffered
// bytes of messages not yet stored (nats-server's jetstream
// max_buffered_size; 0: the default 128 MiB) and opens the workspace
// bucket on it.
func limitedStore(t testing.TB, maxBuffered string) (*objectstore.Store, jetstream.JetStream) {
	t.Helper()
	cfg := broker.Config{}
	if maxBuffered != "" {
		conf := filepath.Join(t.TempDir(), "ingest.conf")
		if err := os.WriteFile(conf, []byte("jetstream { max_buffered_size: "+maxBuffered+" }\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.AccountsFile = conf
	}
	b := testenv.StartBrokerWith(t, cfg)
	js := testenv.JetStream(t, testenv.Connect(t, b.ClientURL()))
	ctx := testenv.Context(t, 10*time.Second)
	if _, err := objectstore.Ensure(ctx, js, objectstore.Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := objectstore.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	return st, js
}

// pattern returns n bytes of a fixed pseudo-random pattern (xorshift),
// quick to make and not compressible.
func pattern(n int) []byte {
	b := make([]byte, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := 0; i+8 <= n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for j := range 8 {
			b[i+j] = byte(x >> (8 * j))
		}
	}
	return b
}

// chunksOf returns how many messages the stream holds for the chunks of
// object name.
func chunksOf(t *testing.T, st *objectstore.Store, name string) uint64 {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	info, err := st.Raw().GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return subjectMsgs(t, st, objectstore.ChunkSubject(st.Bucket(), info.NUID))
}

func subjectMsgs(t *testing.T, st *objectstore.Store, filter string) uint64 {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	stream, err := st.JS().Stream(ctx, objectstore.StreamName(st.Bucket()))
	if err != nil {
		t.Fatal(err)
	}
	si, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range si.State.Subjects {
		n += c
	}
	return n
}

// checkObject reads object name back with nats.go's own Get (which
// checks the digest) and compares it with want.
func checkObject(t *testing.T, st *objectstore.Store, name string, want []byte) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	res, err := st.Raw().Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	h := sha256.New()
	if _, err := io.Copy(h, res); err != nil {
		t.Fatalf("nats.go Get of %s: %v", name, err)
	}
	if got, wantSum := hex.EncodeToString(h.Sum(nil)), sha256.Sum256(want); got != hex.EncodeToString(wantSum[:]) {
		t.Fatalf("%s reads back as sha256 %s, want %x", name, got, wantSum)
	}
	info, err := res.Info()
	if err != nil {
		t.Fatal(err)
	}
	if n := chunksOf(t, st, name); info.Size != uint64(len(want)) || uint64(info.Chunks) != n {
		t.Fatalf("info = size %d, %d chunks; the stream holds %d chunks; want size %d", info.Size, info.Chunks, n, len(want))
	}
}

// TestPutThroughIngestLimit: on a server whose streams buffer at most 1
// MiB (two chunks), nats.go's ObjectStore.Put of 32 MiB is refused with
// 429 too many requests, while Store.Put of the same bytes goes through
// (it sends again what was refused), reads back byte for byte with
// nats.go's Get, and keeps its chunks in order; four such puts at once
// all go through.
func TestPutThroughIngestLimit(t *testing.T) {
	st, js := limitedStore(t, "1MB")
	ctx := testenv.Context(t, 3*time.Minute)
	data := pattern(32 << 20)

	obs, err := js.ObjectStore(ctx, objectstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	// The fault is real: nats.go's own Put fails on it (within a few
	// tries: a quick server may swallow one put whole).
	for try := 0; ; try++ {
		_, err = obs.Put(ctx, jetstream.ObjectMeta{Name: "raw", Opts: &jetstream.ObjectMetaOptions{ChunkSize: objectstore.ChunkSize}}, bytes.NewReader(data))
		if objectstore.TooManyRequests(err) {
			break
		}
		if err != nil || try == 4 {
			t.Fatalf("nats.go Put through a 1 MB ingest queue, try %d: %v, want 429 too many requests (else this server does not show the fault)", try+1, err)
		}
	}

	pressUntilRefused(t, st, "ours", data)

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = st.Put(ctx, "t", "s", fmt.Sprintf("p%d", i), 1, bytes.NewReader(data[:8<<20]), func() objectstore.Counts { return objectstore.Counts{} })
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("put %d of 4 at once: %v", i, err)
		}
		checkObject(t, st, fmt.Sprintf("t/s/p%d.tar", i), data[:8<<20])
	}
}

// TestPutThroughIngestLimitAsNode: the same with a node's credentials
// and permissions (engine serve's default): taking back chunks the stream
// stored out of order after a refusal is allowed to a node in the
// workspace bucket.
func TestPutThroughIngestLimitAsNode(t *testing.T) {
	store := auth.Open(t.TempDir())
	for _, id := range [][2]string{{"engine", "engine"}, {"node-1", "node"}} {
		if _, err := store.Add(id[0], auth.Role(id[1]), ""); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(store.Dir(), "ingest.conf")
	if err := os.WriteFile(conf, []byte("include \"accounts.conf\"\njetstream { max_buffered_size: 1MB }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := testenv.StartBrokerWith(t, broker.Config{AccountsFile: conf})
	ctx := testenv.Context(t, 3*time.Minute)
	engine := testenv.JetStream(t, testenv.ConnectAs(t, b.ClientURL(), store.CredsPath("engine")).Conn)
	if _, err := objectstore.Ensure(ctx, engine, objectstore.Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := objectstore.Open(ctx, testenv.JetStream(t, testenv.ConnectAs(t, b.ClientURL(), store.CredsPath("node-1")).Conn), "")
	if err != nil {
		t.Fatal(err)
	}
	pressUntilRefused(t, st, "as-node", pattern(16<<20))
}

// pressUntilRefused puts data in rounds of four puts at once until the
// server has refused a chunk at least once, at most five rounds: one put
// alone may meet a server quick enough to refuse nothing (seen on CI).
// Every object must read back whole.
func pressUntilRefused(t *testing.T, st *objectstore.Store, prefix string, data []byte) {
	t.Helper()
	ctx := testenv.Context(t, 3*time.Minute)
	retries := 0
	for round := 0; round < 5 && retries == 0; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				n, _, err := st.PutObject(ctx, fmt.Sprintf("%s-%d-%d", prefix, round, i), bytes.NewReader(data))
				mu.Lock()
				retries += n
				mu.Unlock()
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("put %d of round %d: %v", i, round, err)
			}
			checkObject(t, st, fmt.Sprintf("%s-%d-%d", prefix, round, i), data)
		}
	}
	if retries == 0 {
		t.Fatal("no chunk was sent again in five rounds of four puts: the server refused none, so this proves nothing")
	}
	t.Logf("%d chunks sent again", retries)
}

// TestPutRefusedEveryTime: when the server refuses every chunk (its
// ingest queue is smaller than one), the put fails after MaxTries with
// unavailable, a message that says why and how often, the server's error
// inside, and nothing left in the bucket.
func TestPutRefusedEveryTime(t *testing.T) {
	st, _ := limitedStore(t, "256KB")
	st = st.WithLimits(objectstore.PutLimits{MaxTries: 3, Backoff: time.Millisecond})
	ctx := testenv.Context(t, time.Minute)
	_, err := st.Put(ctx, "t", "s", "big", 1, bytes.NewReader(pattern(4<<20)), func() objectstore.Counts { return objectstore.Counts{} })
	if errcode.Of(err) != errcode.Unavailable {
		t.Fatalf("err = %v, want unavailable", err)
	}
	var e *errcode.Error
	errors.As(err, &e)
	if want := "store snapshot t/s/big.tar: server ingest limit (429 too many requests) after 3 tries"; e.Message != want {
		t.Fatalf("message = %q, want %q", e.Message, want)
	}
	var pe *objectstore.PublishError
	var api *jetstream.APIError
	if !errors.As(err, &pe) || pe.Tries != 3 || !errors.As(err, &api) || api.ErrorCode != 10167 {
		t.Fatalf("err = %#v, want a *PublishError of 3 tries around the server's 10167", err)
	}
	if n := subjectMsgs(t, st, objectstore.ChunkSubject(st.Bucket(), ">")); n != 0 {
		t.Fatalf("%d chunks left after a failed put, want 0", n)
	}
	if objs, err := st.Objects(ctx); err != nil || len(objs) != 0 {
		t.Fatalf("objects after a failed put = %v, %v; want none", objs, err)
	}
}

// TestPutUnknownOutcome: when acknowledgements time out (1 ms), the put
// learns what the stream holds by publishing under the same message id,
// and stores no chunk twice or out of order: the object reads back byte
// for byte and the stream holds exactly its chunks; also when the server
// refuses some chunks too (a 1 MB ingest queue).
func TestPutUnknownOutcome(t *testing.T) {
	for _, limit := range []string{"", "1MB"} {
		t.Run("limit="+limit, func(t *testing.T) {
			st, _ := limitedStore(t, limit)
			st = st.WithLimits(objectstore.PutLimits{AckTimeout: time.Millisecond, Backoff: time.Millisecond, MaxTries: 50})
			ctx := testenv.Context(t, 2*time.Minute)
			data := pattern(16 << 20)
			retries, settled, err := st.PutObject(ctx, "slow-acks", bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d chunks sent again, %d of unknown outcome settled", retries, settled)
			if settled == 0 {
				t.Fatal("no acknowledgement timed out: this proves nothing")
			}
			checkObject(t, st, "slow-acks", data)
		})
	}
}

// TestPutCancelled: a put whose context ends midway fails with the
// context's error and leaves no chunks.
func TestPutCancelled(t *testing.T) {
	st, _ := limitedStore(t, "")
	ctx, cancel := context.WithCancel(testenv.Context(t, time.Minute))
	r := &cutReader{r: bytes.NewReader(pattern(16 << 20)), after: 4 << 20, cut: cancel}
	_, err := st.Upload(ctx, "t", "u1", r)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled inside", err)
	}
	if n := subjectMsgs(t, st, objectstore.ChunkSubject(st.Bucket(), ">")); n != 0 {
		t.Fatalf("%d chunks left after a cancelled put, want 0", n)
	}
}

// cutReader calls cut once after bytes have been read.
type cutReader struct {
	r     io.Reader
	after int
	n     int
	cut   func()
}

func (c *cutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	if c.n >= c.after && c.cut != nil {
		c.cut()
		c.cut = nil
	}
	return n, err
}

// TestBackoff: waits grow from the base, never pass the cap, and are
// jittered.
func TestBackoff(t *testing.T) {
	seen := map[time.Duration]bool{}
	for n := 1; n <= 40; n++ {
		d := objectstore.Backoff(10*time.Millisecond, n)
		hi := min(10*time.Millisecond<<min(n-1, 16), objectstore.MaxBackoff)
		if d < hi/2 || d > hi {
			t.Fatalf("backoff(10ms, %d) = %s, want within [%s, %s]", n, d, hi/2, hi)
		}
		seen[d] = true
	}
	if len(seen) < 20 {
		t.Fatalf("%d distinct waits of 40: no jitter", len(seen))
	}
	if !strings.Contains((&objectstore.PublishError{Tries: 2, Err: &jetstream.APIError{Code: 429, ErrorCode: 10167}}).Summary(), "429 too many requests) after 2 tries") {
		t.Fatal("PublishError does not say why")
	}
}
