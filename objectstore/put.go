package objectstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/paddock-dev/paddock/errcode"
)

// A put writes an object in nats.go's object store layout, so that
// nats.go's Get, the nats CLI and every other client read it: the chunks
// on $O.<bucket>.C.<nuid> in order, then the object's info (JSON, with
// the SHA-256 digest of the bytes) on $O.<bucket>.M.<base64url(name)>,
// rolled up. nats.go's own ObjectStore.Put publishes every chunk at once
// (up to 4,000 unacknowledged publishes) and gives up on the first
// refusal; a large object then overflows the stream's ingest queue (128
// MiB by default) and the server answers 429 too many requests (err_code
// 10167, nats.go issue 1908). Paddock's put keeps at most Window chunks
// unacknowledged and publishes a refused chunk again after a jittered
// backoff.
//
// A chunk the server refused is not stored, but later chunks of the
// window may have been: the object's chunks must be in order, so a
// refusal sends the window again from the refused chunk (go-back-N). The
// stored chunks after it are deleted by their stream sequence; a chunk
// whose outcome is unknown (its acknowledgement timed out) is first
// published once more under its message id, which the stream
// de-duplicates, so its sequence is known whether the first publish was
// stored or not. The window's chunks are sent again under new message ids
// (the old ones name deleted messages).

// Publishing limits of a put; see PutLimits.
const (
	// Window is how many chunks a put has unacknowledged at once: 32
	// chunks of 512 KiB keep 16 MiB in flight, 1/8 of the server's default
	// ingest queue. With 8 (and 8 read ahead) a persist of 10,000 files
	// took 1.1-1.4 times as long as a tar plus nats.go's put; with 32 (and
	// 16) as long (docs/benchmarks.md).
	Window = 32
	// MaxTries is how often a put publishes one chunk before it fails.
	MaxTries = 10
	// ReadAhead is how many chunks a put reads ahead while it waits for
	// acknowledgements: the writer behind a pipe (a workspace export)
	// stalls only when the server is the slower. Without it a persist of
	// 10,000 files took 1.5 times as long as a tar plus nats.go's put. A
	// put holds at most Window+ReadAhead+2 chunk buffers (25 MiB).
	ReadAhead = 16
)

// PutLimits bound a put's publishing; the zero value is the default.
type PutLimits struct {
	// Window is how many chunks may be unacknowledged (default Window).
	Window int
	// MaxTries is the publishes of one chunk before the put fails
	// (default MaxTries).
	MaxTries int
	// Backoff is the first wait before a chunk is sent again; each
	// further try doubles it, up to 2 s, and a random part of it is
	// waited (default 50 ms).
	Backoff time.Duration
	// AckTimeout bounds the wait for one chunk's acknowledgement (default
	// 10 s); a chunk whose acknowledgement does not come is sent again.
	AckTimeout time.Duration
	// ChunkSize is the size of a chunk (default ChunkSize).
	ChunkSize int
	// ReadAhead is how many chunks are read ahead of the publishing
	// (default ReadAhead).
	ReadAhead int
}

func (l PutLimits) withDefaults() PutLimits {
	if l.Window <= 0 {
		l.Window = Window
	}
	if l.MaxTries <= 0 {
		l.MaxTries = MaxTries
	}
	if l.Backoff <= 0 {
		l.Backoff = 50 * time.Millisecond
	}
	if l.AckTimeout <= 0 {
		l.AckTimeout = 10 * time.Second
	}
	if l.ChunkSize <= 0 {
		l.ChunkSize = ChunkSize
	}
	if l.ReadAhead <= 0 {
		l.ReadAhead = ReadAhead
	}
	return l
}

// syncTimeout is the least a put waits for the answer to a synchronous
// publish (its info, or a chunk whose outcome it must learn).
const syncTimeout = 5 * time.Second

// maxBackoff caps the wait between two tries of a chunk.
const maxBackoff = 2 * time.Second

// backoff returns the wait before try n (1 for the first retry): a random
// duration up to base·2^(n-1), capped (full jitter, so that puts refused
// together do not come back together).
func backoff(base time.Duration, n int) time.Duration {
	d := base << min(n-1, 16)
	if d <= 0 || d > maxBackoff {
		d = maxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

// PublishError is a put that failed because the server did not take one
// of its chunks (or its info) after Tries publishes. Err is the last
// failure, a *jetstream.APIError for a refusal.
type PublishError struct {
	Tries int
	Err   error
}

// Summary says why in Paddock's words, for a client: e.g. "server ingest
// limit (429 too many requests) after 10 tries".
func (e *PublishError) Summary() string {
	return fmt.Sprintf("%s after %d tries", publishReason(e.Err), e.Tries)
}

// Error is the last failure and how often the put tried.
func (e *PublishError) Error() string {
	return fmt.Sprintf("published %d times, the last: %v", e.Tries, e.Err)
}

// Unwrap returns the last failure.
func (e *PublishError) Unwrap() error { return e.Err }

// jsErrStreamTooManyRequests is nats-server's JSStreamTooManyRequests: the
// stream's ingest queue is full.
const jsErrStreamTooManyRequests jetstream.ErrorCode = 10167

// tooManyRequests reports whether err is the server's 429.
func tooManyRequests(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jsErrStreamTooManyRequests || api.Code == 429)
}

// unknownOutcome reports whether a publish that failed with err may have
// been stored after all: no acknowledgement came back.
func unknownOutcome(err error) bool {
	return errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrJetStreamPublisherClosed) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

// transient reports whether a chunk that failed with err may be taken
// when sent again: a full ingest queue, a stream without a leader for a
// moment, or no acknowledgement.
func transient(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jsErrClusterNotAvailable {
		return true // an election
	}
	return tooManyRequests(err) || unknownOutcome(err) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// jsErrClusterNotAvailable is nats-server's JSClusterNotAvailErr
// ("JetStream system temporarily unavailable"). Other 503s (a full store,
// a stream at its limit: 10023, 10077) are not passing.
const jsErrClusterNotAvailable jetstream.ErrorCode = 10008

func publishReason(err error) string {
	switch {
	case tooManyRequests(err):
		return "server ingest limit (429 too many requests)"
	case unknownOutcome(err):
		return "no acknowledgement from the server"
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return "no server answered for the stream"
	}
	return "the server refused a chunk"
}

// chunk is one chunk of a put, unacknowledged or being sent again.
type chunk struct {
	idx  int
	data []byte
	fut  jetstream.PubAckFuture
}

// putter is one put under way.
type putter struct {
	s       *Store
	lim     PutLimits
	pub     jetstream.JetStream // its own, so its acknowledgements are its own
	stream  jetstream.Stream    // opened on the first failure
	nuid    string
	subj    string
	gen     int         // bumped each time the window is sent again
	window  []*chunk    // unacknowledged, in order
	bufs    chan []byte // chunk buffers to reuse (the read-ahead takes them)
	last    uint64      // stream sequence of the last chunk kept
	cur     int         // chunks allowed in flight now: halved on a 429, then grown back
	ok      int         // chunks taken since cur last changed
	tries   int         // failed sends of the window's first chunk so far
	retries int         // chunks sent again in all
	settled int         // chunks of unknown outcome published again to learn it
}

// putInfo is what a put returns besides the object's info.
type putInfo struct {
	info    jetstream.ObjectInfo
	sent    int64 // bytes read from r
	retries int   // chunk publishes that were sent again
	settled int   // chunks of unknown outcome published again to learn it
}

// putObject streams r into a new object named meta.Name (see the comment
// at the top). meta's Metadata is completed by finish, called once r is
// drained with the hex SHA-256 of the bytes stored, before the object's
// info is written. On failure the chunks it stored are purged; an error
// the server's refusal caused is a *PublishError.
func (s *Store) putObject(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader, finish func(storedHex string) map[string]string) (putInfo, error) {
	lim := s.limits.withDefaults()
	pub, err := jetstream.New(s.js.Conn(), jetstream.WithPublishAsyncMaxPending(lim.Window), jetstream.WithPublishAsyncTimeout(lim.AckTimeout))
	if err != nil {
		return putInfo{}, err
	}
	defer pub.CleanupPublisher()
	// An older object of the same name (uploads may reuse one) loses its
	// chunks once this one is written, as with nats.go's Put.
	prev, err := s.obs.GetInfo(ctx, meta.Name, jetstream.GetObjectInfoShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return putInfo{}, err
	}
	meta.Opts = &jetstream.ObjectMetaOptions{ChunkSize: uint32(lim.ChunkSize)}
	p := &putter{s: s, lim: lim, pub: pub, nuid: nuid.Next(), cur: lim.Window, bufs: make(chan []byte, lim.Window+lim.ReadAhead+2)}
	p.subj = chunkSubject(s.bucket, p.nuid)
	info, err := p.run(ctx, meta, r, finish)
	if err != nil {
		p.abort(ctx)
		return putInfo{sent: info.sent, retries: p.retries, settled: p.settled}, err
	}
	info.retries, info.settled = p.retries, p.settled
	if prev != nil && !prev.Deleted && prev.NUID != "" {
		_ = s.PurgeChunks(ctx, prev.NUID)
	}
	return info, nil
}

func (p *putter) run(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader, finish func(string) map[string]string) (putInfo, error) {
	h := sha256.New()
	var out putInfo
	chunks := 0
	stop := make(chan struct{})
	defer close(stop)
	in := p.readAhead(r, stop)
	for {
		var rc readChunk
		select {
		case rc = <-in:
		case <-ctx.Done():
			return out, ctx.Err()
		}
		if rc.err != nil && !errors.Is(rc.err, io.EOF) {
			return out, rc.err
		}
		if rc.n > 0 {
			h.Write(rc.buf[:rc.n])
			out.sent += int64(rc.n)
			c := &chunk{idx: chunks, data: rc.buf[:rc.n]}
			chunks++
			if err := p.send(c); err != nil {
				return out, err
			}
			p.window = append(p.window, c)
			for len(p.window) >= p.cur {
				if err := p.settleFirst(ctx); err != nil {
					return out, err
				}
			}
		}
		if rc.err != nil {
			break // io.EOF
		}
	}
	for len(p.window) > 0 {
		if err := p.settleFirst(ctx); err != nil {
			return out, err
		}
	}
	if err := p.checkChunks(ctx, chunks); err != nil {
		return out, err
	}
	sum := h.Sum(nil)
	if finish != nil {
		meta.Metadata = finish(fmt.Sprintf("%x", sum))
	}
	out.info = jetstream.ObjectInfo{
		ObjectMeta: meta, Bucket: p.s.bucket, NUID: p.nuid, Size: uint64(out.sent), Chunks: uint32(chunks),
		Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum),
	}
	if err := p.writeInfo(ctx, out.info); err != nil {
		return out, err
	}
	out.info.ModTime = time.Now().UTC()
	return out, nil
}

// readChunk is one chunk read ahead: n bytes of buf, and io.EOF with the
// last one (or the read's error).
type readChunk struct {
	buf []byte
	n   int
	err error
}

// readAhead reads r into chunks ahead of the publishing, so that a writer
// behind r (a workspace export through a pipe) goes on while the put
// waits for acknowledgements: up to ReadAhead chunks. Its goroutine ends
// with r (its end or an error), or once stop is closed; a Read under way
// then ends when r does (Store.Put closes its pipe).
func (p *putter) readAhead(r io.Reader, stop <-chan struct{}) <-chan readChunk {
	out := make(chan readChunk, p.lim.ReadAhead)
	made := 0
	go func() {
		for {
			var buf []byte
			select {
			case buf = <-p.bufs:
			default:
				if made < cap(p.bufs) {
					made++
					buf = make([]byte, p.lim.ChunkSize)
					break
				}
				select {
				case buf = <-p.bufs:
				case <-stop:
					return
				}
			}
			n, err := io.ReadFull(r, buf)
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.EOF
			}
			select {
			case out <- readChunk{buf: buf, n: n, err: err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// msgID is the de-duplication id of chunk idx in the current generation.
func (p *putter) msgID(idx int) string {
	return p.nuid + "." + strconv.Itoa(idx) + "." + strconv.Itoa(p.gen)
}

// send publishes c asynchronously under the current generation's id.
func (p *putter) send(c *chunk) error {
	m := nats.NewMsg(p.subj)
	m.Data = c.data
	m.Header.Set(jetstream.MsgIDHeader, p.msgID(c.idx))
	fut, err := p.pub.PublishMsgAsync(m)
	if err != nil {
		return err
	}
	c.fut = fut
	return nil
}

// wait returns c's acknowledgement or why there is none.
func (p *putter) wait(ctx context.Context, c *chunk) (*jetstream.PubAck, error) {
	select {
	case ack := <-c.fut.Ok():
		return ack, nil
	case err := <-c.fut.Err():
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// settleFirst waits for the window's first chunk: acknowledged, it leaves
// the window; failed for a passing reason, the window is recovered (see
// recover); else, or after MaxTries, the put fails.
func (p *putter) settleFirst(ctx context.Context) error {
	c := p.window[0]
	ack, err := p.wait(ctx, c)
	if err == nil {
		p.keep(ack.Sequence)
		if p.ok++; p.ok >= p.cur && p.cur < p.lim.Window {
			p.cur, p.ok = p.cur+1, 0 // one more in flight per window's worth taken
		}
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !transient(err) {
		return err
	}
	if tooManyRequests(err) {
		p.cur, p.ok = max(1, p.cur/2), 0 // the server is behind: fewer in flight
	}
	return p.recover(ctx, err)
}

// keep takes the window's first chunk, stored at seq, out of the window.
func (p *putter) keep(seq uint64) {
	c := p.window[0]
	p.window = p.window[1:]
	p.bufs <- c.data[:cap(c.data)] // never blocks: it holds every buffer
	p.last, p.tries = seq, 0
}

// recover settles the window after its first chunk failed with first. It
// keeps the chunks the stream holds in order from the first on, deletes
// the others the stream holds (by sequence), and sends the rest again
// after a backoff under new message ids. A chunk whose outcome is unknown
// is published again under its id first: the stream stores it or says it
// has it (a duplicate), so its sequence is known and the first publish
// can no longer land later.
func (p *putter) recover(ctx context.Context, first error) error {
	type outcome struct {
		seq uint64
		err error
	}
	outs := make([]outcome, len(p.window))
	outs[0].err = first
	for i, c := range p.window[1:] {
		ack, err := p.wait(ctx, c)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		outs[i+1].err = err
		if err == nil {
			outs[i+1].seq = ack.Sequence
		}
	}
	last, kept, broken := p.last, 0, false
	var drop []uint64
	for i, c := range p.window {
		o := outs[i]
		if o.err != nil && unknownOutcome(o.err) {
			seq, err := p.resolve(ctx, c)
			if err != nil {
				return err
			}
			p.settled++
			o = outcome{seq: seq}
		}
		switch {
		case o.err != nil:
			broken = true // refused: not stored
		case !broken && o.seq > last:
			kept, last = kept+1, o.seq
		default:
			broken = true
			drop = append(drop, o.seq)
		}
	}
	for range kept {
		p.keep(last) // the sequence only matters for the last one kept
	}
	p.last = last
	if len(drop) > 0 {
		st, err := p.openStream(ctx)
		if err != nil {
			return err
		}
		for _, seq := range drop {
			if err := st.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return fmt.Errorf("take back chunk at %d: %w", seq, err)
			}
		}
	}
	if len(p.window) == 0 {
		return nil
	}
	if p.tries++; p.tries >= p.lim.MaxTries {
		return &PublishError{Tries: p.tries, Err: first}
	}
	if err := sleep(ctx, backoff(p.lim.Backoff, p.tries)); err != nil {
		return err
	}
	p.gen++
	for _, c := range p.window {
		if err := p.send(c); err != nil {
			return err
		}
		p.retries++
	}
	return nil
}

// resolve publishes c synchronously under its current id until the
// stream answers, and returns the sequence the stream holds it at.
func (p *putter) resolve(ctx context.Context, c *chunk) (uint64, error) {
	for try := 1; ; try++ {
		m := nats.NewMsg(p.subj)
		m.Data = c.data
		m.Header.Set(jetstream.MsgIDHeader, p.msgID(c.idx))
		actx, cancel := context.WithTimeout(ctx, max(p.lim.AckTimeout, syncTimeout))
		ack, err := p.pub.PublishMsg(actx, m)
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if !transient(err) {
			return 0, err
		}
		if try >= p.lim.MaxTries {
			return 0, &PublishError{Tries: try, Err: err}
		}
		if err := sleep(ctx, backoff(p.lim.Backoff, try)); err != nil {
			return 0, err
		}
	}
}

// writeInfo publishes the object's info, which makes the object exist.
func (p *putter) writeInfo(ctx context.Context, info jetstream.ObjectInfo) error {
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	subj := "$O." + p.s.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(info.Name))
	for try := 1; ; try++ {
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		m.Header.Set(jetstream.MsgIDHeader, p.nuid+".info")
		actx, cancel := context.WithTimeout(ctx, max(p.lim.AckTimeout, syncTimeout))
		_, err := p.pub.PublishMsg(actx, m)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !transient(err) {
			return err
		}
		if try >= p.lim.MaxTries {
			return &PublishError{Tries: try, Err: err}
		}
		if err := sleep(ctx, backoff(p.lim.Backoff, try)); err != nil {
			return err
		}
	}
}

// checkChunks makes sure the stream holds the put's n chunks before its
// info names them: a sweep removes chunks no object names once they are
// older than its grace period, which a put that stalled that long may
// have met.
func (p *putter) checkChunks(ctx context.Context, n int) error {
	st, err := p.openStream(ctx)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(p.subj))
	if err != nil {
		return err
	}
	if got := info.State.Subjects[p.subj]; got != uint64(n) {
		return errcode.New(errcode.Unavailable, "the stream holds %d of the %d chunks put: removed while the put stalled (engine gc --orphan-grace)", got, n)
	}
	return nil
}

func (p *putter) openStream(ctx context.Context) (jetstream.Stream, error) {
	if p.stream != nil {
		return p.stream, nil
	}
	if p.s.stream != nil { // the store's, opened once: a stream info request fewer per put
		st, err := p.s.stream.get(ctx, p.s.js, StreamName(p.s.bucket))
		if err != nil {
			return nil, err
		}
		p.stream = st
		return st, nil
	}
	st, err := p.s.js.Stream(ctx, StreamName(p.s.bucket))
	if err != nil {
		return nil, err
	}
	p.stream = st
	return st, nil
}

// abort purges what a failed put stored, once its unacknowledged chunks
// are settled (a chunk still in flight could land after the purge).
func (p *putter) abort(ctx context.Context) {
	if p.pub.Conn().IsClosed() {
		return // nothing to purge with: a sweep removes the chunks (see sweep.go)
	}
	// A bound of its own: ctx may be what ran out.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lim.AckTimeout)
	defer cancel()
	select {
	case <-p.pub.PublishAsyncComplete():
	case <-actx.Done():
	}
	_ = p.s.PurgeChunks(actx, p.nuid)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
