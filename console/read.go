package console

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/audit"
	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/operator"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
)

// Reader reads what the console shows, through the CLI's read paths.
type Reader struct {
	js  jetstream.JetStream
	log *events.Log
	// authDir is the auth store whose issued keys the audit check trusts
	// (auth.TrustedNodeKeys; a directory without a store: the keys nodes
	// registered).
	authDir string
}

// NewReader returns a reader of the Paddock deployment js reaches.
func NewReader(js jetstream.JetStream, authDir string) *Reader {
	return &Reader{js: js, log: events.NewLog(js, "", ""), authDir: authDir}
}

// Filter selects sessions. Empty fields select everything.
type Filter struct {
	Tenant string
	Status projection.Status
	Node   string
	// Label is K=V: sessions with label K set to V.
	Label string
	// Since and Until bound the sessions' creation time.
	Since, Until time.Time
	// Deleted includes deleted sessions (hidden otherwise unless Status
	// asks for them), as `sandbox list --all`.
	Deleted bool
}

// MaxSessions bounds the sessions one page lists.
const MaxSessions = 500

// Sessions returns the sessions of the projection that v may see and f
// selects, newest first, at most MaxSessions (more reports there were
// more). A tenant v may not see is permission_denied.
func (r *Reader) Sessions(ctx context.Context, v Viewer, f Filter) (recs []projection.SessionRecord, more bool, err error) {
	if f.Tenant != "" && !v.May(f.Tenant) {
		return nil, false, errcode.New(errcode.PermissionDenied, "%s may not see tenant %s", v.Name, f.Tenant)
	}
	tenant := f.Tenant
	if tenant == "" {
		tenant = v.Tenant
	}
	key := ">"
	if tenant != "" {
		if err := commands.CheckToken("tenant", tenant); err != nil {
			return nil, false, err
		}
		key = projection.TenantKeys(tenant)
	}
	var lk, lv string
	if f.Label != "" {
		var ok bool
		if lk, lv, ok = strings.Cut(f.Label, "="); !ok || lk == "" {
			return nil, false, errcode.New(errcode.InvalidRequest, "label %q is not K=V", f.Label)
		}
	}
	ss, err := projector.OpenSessions(ctx, r.js)
	if err != nil {
		return nil, false, err
	}
	all, err := ss.List(ctx, key)
	if err != nil {
		return nil, false, err
	}
	for _, rec := range all {
		switch {
		case !v.May(rec.Tenant),
			f.Status != "" && rec.Status != f.Status,
			f.Status == "" && !f.Deleted && rec.Status == projection.StatusDeleted,
			f.Node != "" && rec.Node != f.Node,
			lk != "" && rec.Labels[lk] != lv,
			!f.Since.IsZero() && rec.CreatedAt.Before(f.Since),
			!f.Until.IsZero() && rec.CreatedAt.After(f.Until):
			continue
		}
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].CreatedAt.Equal(recs[j].CreatedAt) {
			return recs[i].CreatedAt.After(recs[j].CreatedAt)
		}
		return recs[i].Tenant+"/"+recs[i].ID < recs[j].Tenant+"/"+recs[j].ID
	})
	if len(recs) > MaxSessions {
		return recs[:MaxSessions], true, nil
	}
	return recs, false, nil
}

// checkSession refuses a tenant or session id that is not a subject token,
// and a tenant v may not see. The refusal of another tenant's session is
// session_not_found, the same answer as for a session that does not
// exist, so that a viewer learns nothing of other tenants' ids.
func checkSession(v Viewer, tenant, id string) error {
	for _, f := range [][2]string{{"tenant", tenant}, {"session", id}} {
		if err := commands.CheckToken(f[0], f[1]); err != nil {
			return err
		}
	}
	if !v.May(tenant) {
		return errcode.New(errcode.SessionNotFound, "no session %s in tenant %s", id, tenant)
	}
	return nil
}

// Session is one session as its page shows it.
type Session struct {
	Record projection.SessionRecord
	// Recorded says the projection has a record of it.
	Recorded bool
	Ops      []Op
	Events   int
	// LastStreamSeq is the stream seq of the session's last event read:
	// where a live tail starts after.
	LastStreamSeq uint64
}

// Session returns one session's record and its timeline, from its
// events. A session with no events (or one v may not see) is
// session_not_found.
func (r *Reader) Session(ctx context.Context, v Viewer, tenant, id string) (Session, error) {
	if err := checkSession(v, tenant, id); err != nil {
		return Session{}, err
	}
	var msgs []events.Msg
	err := r.log.Read(ctx, events.ReadOptions{Filters: []string{r.log.Subjects().SessionFilter(tenant, id)}}, func(m events.Msg) error {
		msgs = append(msgs, m)
		return nil
	})
	if err != nil {
		return Session{}, err
	}
	if len(msgs) == 0 {
		return Session{}, errcode.New(errcode.SessionNotFound, "no events of session %s in tenant %s", id, tenant)
	}
	s := Session{Ops: Timeline(msgs), Events: len(msgs), LastStreamSeq: msgs[len(msgs)-1].StreamSeq}
	if ss, err := projector.OpenSessions(ctx, r.js); err == nil {
		s.Record, s.Recorded, _ = ss.Get(ctx, tenant, id)
	}
	if !s.Recorded {
		s.Record = projection.SessionRecord{Session: projection.Session{Tenant: tenant, ID: id}}
	}
	return s, nil
}

// Verification is the audit check of one session.
type Verification struct {
	Report audit.Report
	// Failures are the findings that fail the audit; Failed is the first
	// of them (nil when the session passes).
	Failures []audit.Finding
	Failed   *audit.Finding
	// Open counts operations without their finish.
	Open int
	// KeysFrom says where the trusted node keys came from.
	KeysFrom string
}

// Verify checks one session's history as `engine audit verify --session`
// does: signatures against the issued node keys, the hash chain, seqs,
// one finish per start, lineage. A session with no events (or one v may
// not see) is session_not_found.
func (r *Reader) Verify(ctx context.Context, v Viewer, tenant, id string) (Verification, error) {
	if err := checkSession(v, tenant, id); err != nil {
		return Verification{}, err
	}
	issued, engines, keysFrom, err := auth.TrustedNodeKeys("", r.authDir)
	if err != nil {
		return Verification{}, err
	}
	info, err := r.log.StreamInfo(ctx)
	if err != nil {
		return Verification{}, errcode.Wrap(errcode.Unavailable, err, "events stream")
	}
	checker := audit.NewChecker(r.log.Subjects(), info.State.FirstSeq)
	checker.SetTrust(audit.Trust{Issued: issued, Engines: engines, RequireSigned: true})
	checker.SetPartial(true)
	check := func(m events.Msg) error { checker.Check(m); return nil }
	// The nodes' registered events first: they say which key each node
	// signs with.
	if err := r.log.Read(ctx, events.ReadOptions{Filters: []string{r.log.Subjects().AllNodes()}}, check); err != nil {
		return Verification{}, err
	}
	if err := r.log.Read(ctx, events.ReadOptions{Filters: []string{r.log.Subjects().SessionFilter(tenant, id)}}, check); err != nil {
		return Verification{}, err
	}
	res := Verification{Report: checker.Report(), KeysFrom: keysFrom}
	if res.Report.Events == 0 {
		return Verification{}, errcode.New(errcode.SessionNotFound, "no events of session %s in tenant %s", id, tenant)
	}
	for _, f := range res.Report.Findings {
		switch {
		case f.Kind.Failure():
			res.Failures = append(res.Failures, f)
		case f.Kind == audit.Open:
			res.Open++
		}
	}
	if len(res.Failures) > 0 {
		res.Failed = &res.Failures[0]
	}
	return res, nil
}

// Status is the deployment as `engine status` reports it: nodes with
// their pools and disks, storage against its limits, sessions by status.
// Only an admin may read it (permission_denied otherwise).
func (r *Reader) Status(ctx context.Context, v Viewer, wait time.Duration) (operator.Report, error) {
	if !v.Admin() {
		return operator.Report{}, errcode.New(errcode.PermissionDenied, "%s is a %s: nodes, pools and storage are for admins", v.Name, v.Role)
	}
	return operator.Status(ctx, r.js, wait)
}

// Tail delivers the events of one session from stream seq after+1 as they
// are stored, until ctx ends or fn fails. A session v may not see is
// session_not_found.
func (r *Reader) Tail(ctx context.Context, v Viewer, tenant, id string, after uint64, fn func(events.Msg) error) error {
	if err := checkSession(v, tenant, id); err != nil {
		return err
	}
	err := r.log.Read(ctx, events.ReadOptions{Filters: []string{r.log.Subjects().SessionFilter(tenant, id)}, StartSeq: after + 1, Follow: true}, fn)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}
