package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
)

// QueueGroup is the queue group the engines' transfer services share for
// opening transfers.
const QueueGroup = "paddock-transfer"

// Store is what the service needs of the workspace bucket.
type Store interface {
	Upload(ctx context.Context, tenant, id string, r io.Reader) (string, error)
	Copy(ctx context.Context, name string, w io.Writer) (int64, error)
	Delete(ctx context.Context, name string) error
}

var _ Store = (*objectstore.Store)(nil)

// Config configures a Service.
type Config struct {
	// Prefix of every subject (default sbx).
	Prefix string
	// Idle aborts a transfer that hears nothing for this long (default 30s).
	Idle time.Duration
	// PerTenant and Total bound the transfers open at once (defaults 8
	// and 256); one more is quota_exceeded.
	PerTenant, Total int
}

func (c Config) withDefaults() Config {
	if c.Idle <= 0 {
		c.Idle = 30 * time.Second
	}
	if c.PerTenant <= 0 {
		c.PerTenant = 8
	}
	if c.Total <= 0 {
		c.Total = 256
	}
	return c
}

// Service serves transfers. Start it, then Close it.
type Service struct {
	nc     *nats.Conn
	store  Store
	cfg    Config
	subj   commands.Subjects
	logger *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the transfers' goroutines

	mu     sync.Mutex // guards the fields below
	open   map[string]*transfer
	tenant map[string]int
	subs   []*nats.Subscription
}

// New returns a service on nc that stores into store.
func New(nc *nats.Conn, store Store, cfg Config, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	// The service's context ends at Close, not with any caller's.
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		nc: nc, store: store, cfg: cfg, subj: commands.Subjects{Prefix: cfg.Prefix}, logger: logger,
		ctx: ctx, cancel: cancel, open: map[string]*transfer{}, tenant: map[string]int{},
	}
}

// Start subscribes to every tenant's upload and download subjects.
func (s *Service) Start(ctx context.Context) error {
	for subj, h := range map[string]nats.MsgHandler{s.subj.UploadAll(): s.handleUpload, s.subj.DownloadAll(): s.handleDownload} {
		sub, err := s.nc.QueueSubscribe(subj, QueueGroup, commandsOnly(h))
		if err != nil {
			s.Close()
			return fmt.Errorf("transfer: subscribe %s: %w", subj, err)
		}
		s.mu.Lock()
		s.subs = append(s.subs, sub)
		s.mu.Unlock()
	}
	if err := s.nc.FlushWithContext(ctx); err != nil {
		s.Close()
		return fmt.Errorf("transfer: flush: %w", err)
	}
	return nil
}

// Close stops taking transfers, aborts the open ones and waits for them.
// It is safe to call twice.
func (s *Service) Close() {
	s.mu.Lock()
	subs := s.subs
	s.subs = nil
	open := make([]*transfer, 0, len(s.open))
	for _, t := range s.open {
		open = append(open, t)
	}
	s.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	for _, t := range open {
		t.abort(errors.New("the engine is stopping"))
	}
	s.cancel()
	s.wg.Wait()
}

// Open reports how many transfers are open (for tests and diagnostics).
func (s *Service) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// transfer is one open upload or download.
type transfer struct {
	s      *Service
	id     string
	tenant string
	sub    *nats.Subscription
	idle   *time.Timer

	mu     sync.Mutex // guards pos and ended
	pos    int64
	ended  bool
	w      *io.PipeWriter           // an upload's chunks go in here
	r      *io.PipeReader           // a download's chunks come from here
	fail   func(error)              // closes the pipe with an error
	result chan transferResult      // the streaming goroutine's outcome
	handle func(m *nats.Msg) []byte // serves one chunk

	outcomeOnce sync.Once
	got         transferResult // result's value, once taken (outcome)
}

// outcome waits for the streaming goroutine's result and returns it, to
// every caller: a chunk that arrives after another chunk took the result
// (a retry after an abort) gets it too, instead of waiting for a second
// value that never comes.
func (t *transfer) outcome() transferResult {
	t.outcomeOnce.Do(func() { t.got = <-t.result })
	return t.got
}

type transferResult struct {
	name string
	n    int64
	err  error
}

func reply(m *nats.Msg, data []byte) {
	if m.Reply != "" {
		_ = m.Respond(data)
	}
}

// commandsOnly drops what JetStream delivered onto a transfer subject, and
// what is no request (auth.RequireReply), before h sees it.
func commandsOnly(h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		if auth.RequireReply(m) != nil {
			return
		}
		h(m)
	}
}

// decode reads the tenant of a transfer-opening subject and the request.
func (s *Service) decode(m *nats.Msg, args interface{ Validate() error }) (string, bool) {
	tenant, ok := s.subj.ParseTenant(m.Subject)
	err := commands.CheckToken("tenant", tenant)
	if !ok && err == nil {
		err = errcode.New(errcode.InvalidRequest, "subject %s names no tenant", m.Subject)
	}
	if err == nil {
		_, err = commands.DecodeRequest(m.Data, args)
	}
	if err == nil {
		err = args.Validate()
	}
	if err == nil {
		var c auth.Caller
		if c, err = auth.CallerOf(m); err == nil {
			_, err = c.Authorize(tenant, "")
		}
	}
	if err != nil {
		reply(m, commands.ErrorReply(err))
		return "", false
	}
	return tenant, true
}

// admit registers t, or refuses it when its tenant or the service is at
// its bound.
func (s *Service) admit(t *transfer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ctx.Err() != nil:
		return errcode.New(errcode.Unavailable, "the engine is stopping")
	case s.tenant[t.tenant] >= s.cfg.PerTenant:
		return errcode.New(errcode.QuotaExceeded, "tenant %s has %d transfers open, its limit; retry when one ends", t.tenant, s.cfg.PerTenant)
	case len(s.open) >= s.cfg.Total:
		return errcode.New(errcode.QuotaExceeded, "this engine has %d transfers open, its limit; retry shortly", s.cfg.Total)
	}
	s.open[t.id] = t
	s.tenant[t.tenant]++
	return nil
}

// start subscribes t's chunk subject and arms its idle timer; the
// streaming goroutine must already run. It answers m with where to send.
func (s *Service) start(m *nats.Msg, t *transfer) {
	subj := s.subj.Transfer(t.tenant, t.id)
	t.idle = time.AfterFunc(s.cfg.Idle, func() { t.abort(errcode.New(errcode.Unavailable, "transfer %s idle for %s", t.id, s.cfg.Idle)) })
	sub, err := s.nc.Subscribe(subj, func(cm *nats.Msg) {
		if auth.RequireReply(cm) != nil {
			return
		}
		t.idle.Reset(s.cfg.Idle)
		reply(cm, t.handle(cm))
	})
	if err == nil {
		err = s.nc.Flush()
	}
	if err != nil {
		t.abort(err)
		reply(m, commands.ErrorReply(errcode.Wrap(errcode.Unavailable, err, "open transfer")))
		return
	}
	t.mu.Lock()
	t.sub = sub
	ended := t.ended
	t.mu.Unlock()
	if ended { // aborted meanwhile
		_ = sub.Unsubscribe()
	}
	body, _ := commands.ResultReply(commands.TransferOpened{Subject: subj, ChunkBytes: commands.TransferChunkBytes})
	reply(m, body)
}

// launch registers t, runs stream (what moves the bytes between the
// chunks and the bucket) in a goroutine the service waits for at Close,
// and answers m with where to send the chunks; or refuses t when its
// tenant or the service is at its bound.
func (s *Service) launch(m *nats.Msg, t *transfer, stream func() transferResult) {
	if err := s.admit(t); err != nil {
		reply(m, commands.ErrorReply(err))
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t.result <- stream()
	}()
	s.start(m, t)
}

// abort ends t with err (the streaming goroutine sees it); it is a no-op
// on an ended transfer.
func (t *transfer) abort(err error) {
	if t.end() {
		t.fail(err)
		t.s.logger.Info("transfer aborted", "tenant", t.tenant, "transfer", t.id, "err", err)
	}
}

// end marks t ended and releases it: subscription, timer, counts. It
// reports whether this call ended it.
func (t *transfer) end() bool {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return false
	}
	t.ended = true
	sub := t.sub
	t.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	if t.idle != nil {
		t.idle.Stop()
	}
	s := t.s
	s.mu.Lock()
	delete(s.open, t.id)
	if s.tenant[t.tenant]--; s.tenant[t.tenant] <= 0 {
		delete(s.tenant, t.tenant)
	}
	s.mu.Unlock()
	return true
}

func (s *Service) handleUpload(m *nats.Msg) {
	var args commands.UploadArgs
	tenant, ok := s.decode(m, &args)
	if !ok {
		return
	}
	if args.Discard != "" {
		err := objectstore.CheckUpload(tenant, args.Discard)
		if err == nil {
			err = s.store.Delete(s.ctx, args.Discard)
		}
		if err != nil {
			reply(m, commands.ErrorReply(err))
			return
		}
		body, _ := commands.ResultReply(struct{}{})
		reply(m, body)
		return
	}
	pr, pw := io.Pipe()
	t := &transfer{s: s, id: uuid.NewString(), tenant: tenant, w: pw, fail: func(err error) { pw.CloseWithError(err) }, result: make(chan transferResult, 1)}
	t.handle = t.uploadChunk
	s.launch(m, t, func() transferResult { // ends when the pipe does: at the last chunk, or an abort
		name, err := s.store.Upload(s.ctx, tenant, t.id, pr)
		_ = pr.CloseWithError(errors.New("upload ended"))
		return transferResult{name: name, err: err}
	})
}

// chunk decodes a chunk request into args and returns the position the
// transfer has reached, or the error reply for a bad request or an ended
// transfer.
func (t *transfer) chunk(m *nats.Msg, args interface{ Validate() error }) (int64, []byte) {
	_, err := commands.DecodeRequest(m.Data, args)
	if err == nil {
		err = args.Validate()
	}
	if err != nil {
		return 0, commands.ErrorReply(err)
	}
	t.mu.Lock()
	pos, ended := t.pos, t.ended
	t.mu.Unlock()
	if ended {
		return 0, commands.ErrorReply(errcode.New(errcode.Unavailable, "transfer %s has ended", t.id))
	}
	return pos, nil
}

// uploadChunk takes one chunk, in order, into the pipe.
func (t *transfer) uploadChunk(m *nats.Msg) []byte {
	var c commands.UploadChunk
	pos, refused := t.chunk(m, &c)
	switch {
	case refused != nil:
		return refused
	case c.Offset < pos && !c.Last:
		// A retry of a chunk already taken: its answer was lost.
		body, _ := commands.ResultReply(commands.UploadProgress{Received: pos})
		return body
	case c.Offset != pos:
		return commands.ErrorReply(errcode.New(errcode.InvalidRequest, "chunk at offset %d, but %d bytes were received", c.Offset, pos))
	case pos+int64(len(c.Data)) > commands.MaxFileBytes:
		t.abort(errors.New("too large"))
		return commands.ErrorReply(errcode.New(errcode.PayloadTooLarge, "an upload is at most %d bytes", int64(commands.MaxFileBytes)))
	}
	if _, err := t.w.Write(c.Data); err != nil {
		t.abort(err)
		// The store stopped reading: its own error says why (a bucket at
		// its quota is storage_quota_exceeded, which a retry cannot fix).
		// The streaming goroutine sends it as soon as the store returns.
		if r := t.outcome(); errcode.Of(r.err) == errcode.StorageQuotaExceeded {
			return commands.ErrorReply(r.err)
		}
		return commands.ErrorReply(errcode.Wrap(errcode.Unavailable, err, "upload"))
	}
	t.mu.Lock()
	t.pos += int64(len(c.Data))
	pos = t.pos
	t.mu.Unlock()
	if !c.Last {
		body, _ := commands.ResultReply(commands.UploadProgress{Received: pos})
		return body
	}
	_ = t.w.Close()
	r := t.outcome()
	t.end()
	if r.err != nil {
		return commands.ErrorReply(r.err)
	}
	body, _ := commands.ResultReply(commands.UploadProgress{Received: pos, Upload: r.name})
	return body
}

func (s *Service) handleDownload(m *nats.Msg) {
	var args commands.DownloadArgs
	tenant, ok := s.decode(m, &args)
	if !ok {
		return
	}
	if err := objectstore.CheckUpload(tenant, args.Name); err != nil {
		reply(m, commands.ErrorReply(err))
		return
	}
	pr, pw := io.Pipe()
	t := &transfer{s: s, id: uuid.NewString(), tenant: tenant, r: pr, fail: func(err error) { pr.CloseWithError(err) }, result: make(chan transferResult, 1)}
	t.handle = func(cm *nats.Msg) []byte { return t.downloadChunk(cm, args.Name) }
	s.launch(m, t, func() transferResult { // ends when the object is read (the digest checked) or the pipe is closed
		n, err := s.store.Copy(s.ctx, args.Name, pw)
		_ = pw.CloseWithError(err) // nil: EOF for the reader
		return transferResult{n: n, err: err}
	})
}

// downloadChunk serves the chunk at the position reached, in order; the
// last one comes once the store has checked the object's digest.
func (t *transfer) downloadChunk(m *nats.Msg, name string) []byte {
	var c commands.DownloadChunk
	pos, refused := t.chunk(m, &c)
	if refused != nil {
		return refused
	}
	if c.Offset != pos {
		return commands.ErrorReply(errcode.New(errcode.InvalidRequest, "chunk at offset %d, but %d bytes were sent", c.Offset, pos))
	}
	buf := make([]byte, commands.TransferChunkBytes)
	n, err := io.ReadFull(t.r, buf)
	t.mu.Lock()
	t.pos += int64(n)
	t.mu.Unlock()
	switch {
	case err == nil:
		body, _ := commands.ResultReply(commands.DownloadData{Data: buf[:n]})
		return body
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		r := t.outcome()
		t.end()
		if r.err != nil {
			return commands.ErrorReply(r.err)
		}
		// A download object is temporary: gone once read.
		dctx, cancel := context.WithTimeout(t.s.ctx, 10*time.Second)
		defer cancel()
		if err := t.s.store.Delete(dctx, name); err != nil {
			t.s.logger.Warn("deleting a downloaded object", "name", name, "err", err)
		}
		body, _ := commands.ResultReply(commands.DownloadData{Data: buf[:n], Last: true})
		return body
	default:
		t.abort(err)
		return commands.ErrorReply(errcode.Wrap(errcode.Unavailable, err, "download"))
	}
}
