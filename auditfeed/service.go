package auditfeed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
)

// QueueGroup is the queue group of the engines serving auditors.
const QueueGroup = "paddock-auditfeed"

// Config names the subjects and the stream.
type Config struct {
	// Prefix is the subject prefix (default "sbx").
	Prefix string
	// Stream is the events stream (default events.DefaultStream).
	Stream string
}

// Service answers auditors' consumer requests. Start subscribes; Close
// unsubscribes and waits for the request in hand.
type Service struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	subj   commands.Subjects
	evsubj events.Subjects
	stream string
	logger *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	wg sync.WaitGroup // the requests in hand

	mu     sync.Mutex // guards the fields below
	sub    *nats.Subscription
	closed bool
}

// New returns a service that makes consumers through js (the engine's).
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Stream == "" {
		cfg.Stream = events.DefaultStream
	}
	// The service's context ends at Close, not with any caller's.
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		nc: nc, js: js, subj: commands.Subjects{Prefix: cfg.Prefix}, evsubj: events.Subjects{Prefix: cfg.Prefix},
		stream: cfg.Stream, logger: logger, ctx: ctx, cancel: cancel,
	}
}

// Start subscribes to every auditor's consumer subject.
func (s *Service) Start(ctx context.Context) error {
	sub, err := s.nc.QueueSubscribe(s.subj.AuditConsumerAll(), QueueGroup, s.handle)
	if err != nil {
		return fmt.Errorf("auditfeed: subscribe: %w", err)
	}
	s.mu.Lock()
	s.sub = sub
	s.mu.Unlock()
	if err := s.nc.FlushWithContext(ctx); err != nil {
		s.Close()
		return fmt.Errorf("auditfeed: flush: %w", err)
	}
	return nil
}

// Close stops taking requests, cancels the one in hand and waits for it.
// It is safe to call twice.
func (s *Service) Close() {
	s.mu.Lock()
	sub := s.sub
	s.sub = nil
	s.closed = true
	s.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	s.cancel()
	s.wg.Wait()
}

// handle answers one request. What is no request, was delivered by
// JetStream, or wants its answer anywhere but an inbox is dropped: the
// engine may publish anywhere, so its answer must not land on a command
// subject an auditor chose.
func (s *Service) handle(m *nats.Msg) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	if err := auth.RequireReply(m); err != nil {
		s.logger.Warn("not a request: dropped", "subject", m.Subject, "err", err)
		return
	}
	if !strings.HasPrefix(m.Reply, "_INBOX.") {
		s.logger.Warn("auditor consumer request with a reply outside the inboxes: dropped", "subject", m.Subject)
		return
	}
	res, err := s.serve(m)
	var b []byte
	if err == nil {
		b, err = commands.ResultReply(res)
	}
	if err != nil {
		s.logger.Info("auditor consumer refused", "subject", m.Subject, "err", err)
		b = commands.ErrorReply(err)
	}
	_ = m.Respond(b)
}

func (s *Service) serve(m *nats.Msg) (commands.AuditConsumerResult, error) {
	c, err := auth.CallerOf(m)
	if err == nil {
		err = c.Operator() // a stamp means a tenant's import: not an auditor's
	}
	if err != nil {
		return commands.AuditConsumerResult{}, err
	}
	name, tenant, ok := s.subj.ParseAuditConsumer(m.Subject)
	if !ok {
		return commands.AuditConsumerResult{}, errcode.New(errcode.InvalidRequest, "%s is no auditor's consumer subject", m.Subject)
	}
	id := auth.Identity{Name: name, Role: auth.RoleAuditor, Tenant: tenant}
	if err := commands.CheckToken("auditor", name); err != nil {
		return commands.AuditConsumerResult{}, err
	}
	if tenant != "" {
		if err := auth.CheckTenant(tenant); err != nil {
			return commands.AuditConsumerResult{}, err
		}
	}
	var args commands.AuditConsumerArgs
	req, err := commands.DecodeRequest(m.Data, &args)
	if err == nil {
		err = args.Validate()
	}
	if err == nil {
		if v, _ := commands.ParseVersion(req.Version); !v.Strict() {
			err = errcode.New(errcode.InvalidRequest, "auditor consumer request of contract %s: this engine speaks %s and refuses what it does not know", req.Version, commands.Version)
		}
	}
	if err != nil {
		return commands.AuditConsumerResult{}, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	stream, part, parts, err := s.partition(ctx, args.Stream)
	if err != nil {
		return commands.AuditConsumerResult{}, err
	}
	if !s.mayRead(tenant, args.Filter, part, parts) {
		return commands.AuditConsumerResult{}, errcode.New(errcode.PermissionDenied, "auditor %s may not read %s on %s", name, args.Filter, stream)
	}
	spec := events.ConsumerSpec{Name: id.Consumer(), Filter: args.Filter, StartSeq: args.StartSeq, Durable: args.Durable}
	if args.StartTime != nil {
		spec.StartTime = *args.StartTime
	}
	if _, err := s.js.CreateOrUpdateConsumer(ctx, stream, spec.ConsumerConfig()); err != nil {
		var api *jetstream.APIError
		if errors.As(err, &api) && api.Code == 400 {
			return commands.AuditConsumerResult{}, errcode.New(errcode.InvalidRequest, "consumer %s: %s", spec.Name, api.Description)
		}
		return commands.AuditConsumerResult{}, errcode.Wrap(errcode.Unavailable, err, "consumer "+spec.Name)
	}
	return commands.AuditConsumerResult{Consumer: spec.Name}, nil
}

// partition resolves the stream a request names ("" for the first) to
// one of the deployment's partitions: its stream, its index and the
// number of partitions, read from the first stream's metadata
// (events.OpenLog). A stream that is no partition of the deployment is
// refused (invalid_request): the consumer would be on a stream the
// auditor's filter was not judged for.
func (s *Service) partition(ctx context.Context, stream string) (string, int, int, error) {
	log, err := events.OpenLog(ctx, s.js, s.stream, s.evsubj.Prefix)
	if err != nil {
		return "", 0, 0, err
	}
	if stream == "" {
		stream = s.stream
	}
	for k, st := range log.Streams() {
		if st == stream {
			return st, k, log.Partitions(), nil
		}
	}
	return "", 0, 0, errcode.New(errcode.InvalidRequest, "stream %q is none of the %d event partitions", stream, log.Partitions())
}

// mayRead reports whether an auditor of tenant ("" for every tenant) may
// read filter on partition part of parts: its tenant's session events
// (every tenant's) in that partition, or the node events on partition 0,
// and nothing wider.
func (s *Service) mayRead(tenant, filter string, part, parts int) bool {
	subj := s.evsubj
	subj.Partitions = parts
	sessions := subj.PartitionSessions(part)
	if tenant != "" {
		sessions = strings.TrimSuffix(sessions, ">") + tenant + ".>"
	}
	return Within(filter, sessions) || (part == 0 && Within(filter, subj.AllNodes()))
}

// Within reports whether every subject filter matches also matches
// pattern: token by token, a literal matches itself, a '*' of pattern
// matches any one token (a '*' of filter included), and a '>' of pattern
// matches the rest (at least one token). A filter with an empty token is
// never within anything.
func Within(filter, pattern string) bool {
	f, p := strings.Split(filter, "."), strings.Split(pattern, ".")
	for i, pt := range p {
		if pt == ">" {
			if len(f) <= i {
				return false
			}
			for _, ft := range f[i:] {
				if ft == "" {
					return false
				}
			}
			return true
		}
		if i >= len(f) || f[i] == "" || f[i] == ">" {
			return false
		}
		if pt != "*" && (f[i] == "*" || f[i] != pt) {
			return false
		}
	}
	return len(f) == len(p)
}
