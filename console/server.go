package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/projection"
)

//go:embed assets
var assets embed.FS

// CSP is the Content-Security-Policy of every response: nothing but the
// console's own scripts, styles and connections; no inline script or
// style, no frames, forms that post only to the console.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// CookieName is the console's session cookie.
const CookieName = "paddock_console"

// Config holds the console's settings.
type Config struct {
	// Tokens maps console tokens to viewers (required).
	Tokens *Tokens
	// SessionTTL is how long a browser's login lasts (default 12h).
	SessionTTL time.Duration
	// MaxLogins bounds the browser sessions kept (default 1024; the oldest
	// goes first).
	MaxLogins int
	// MaxTails bounds the live tails open at once (default 32); TailFor
	// bounds one tail's life (default 15m: the browser reconnects).
	MaxTails int
	TailFor  time.Duration
	// StatusWait is how long the nodes page listens for heartbeats
	// (default 500ms).
	StatusWait time.Duration
}

// Validate fills in defaults and refuses a config without tokens
// (invalid_request).
func (c *Config) Validate() error {
	if c.Tokens == nil || len(c.Tokens.digests) == 0 {
		return errcode.New(errcode.InvalidRequest, "the console needs tokens: every viewer authenticates as a Paddock identity")
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.MaxLogins <= 0 {
		c.MaxLogins = 1024
	}
	if c.MaxTails <= 0 {
		c.MaxTails = 32
	}
	if c.TailFor <= 0 {
		c.TailFor = 15 * time.Minute
	}
	if c.StatusWait <= 0 {
		c.StatusWait = 500 * time.Millisecond
	}
	return nil
}

// Handler serves the console's pages for the viewers of cfg.Tokens.
type Handler struct {
	r      *Reader
	cfg    Config
	logger *slog.Logger
	pages  map[string]*template.Template
	mux    *http.ServeMux
	tails  chan struct{}

	mu sync.Mutex
	// logins are the browsers' sessions by cookie value. Guarded by mu.
	logins map[string]login
}

type login struct {
	v       Viewer
	expires time.Time
}

// NewHandler returns the console's handler over r. It fails with
// invalid_request on a bad config.
func NewHandler(r *Reader, cfg Config, logger *slog.Logger) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{r: r, cfg: cfg, logger: logger, pages: map[string]*template.Template{}, mux: http.NewServeMux(),
		tails: make(chan struct{}, cfg.MaxTails), logins: map[string]login{}}
	for _, p := range []string{"login", "sessions", "session", "nodes", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/layout.html", "assets/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		h.pages[p] = t
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, fmt.Errorf("console: assets: %w", err)
	}
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) { h.render(w, r, http.StatusOK, "login", nil, nil) })
	h.mux.HandleFunc("POST /login", h.login)
	h.mux.HandleFunc("POST /logout", h.logout)
	h.mux.HandleFunc("GET /{$}", h.authed(h.sessions))
	h.mux.HandleFunc("GET /s/{tenant}/{id}", h.authed(h.session))
	h.mux.HandleFunc("GET /s/{tenant}/{id}/tail", h.authed(h.tail))
	h.mux.HandleFunc("GET /nodes", h.authed(h.nodes))
	return h, nil
}

// ServeHTTP sets the security headers and serves the request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// viewer returns who the request comes from: the bearer token's viewer,
// or the login its cookie names.
func (h *Handler) viewer(r *http.Request) (Viewer, bool) {
	if a := r.Header.Get("Authorization"); a != "" {
		tok, ok := strings.CutPrefix(a, "Bearer ")
		if !ok {
			return Viewer{}, false
		}
		return h.cfg.Tokens.match(tok)
	}
	c, err := r.Cookie(CookieName)
	if err != nil {
		return Viewer{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.logins[c.Value]
	if !ok || time.Now().After(l.expires) {
		delete(h.logins, c.Value)
		return Viewer{}, false
	}
	return l.v, true
}

// authed runs fn for a request with a viewer; a browser without one is
// sent to the login page, any other caller gets 401.
func (h *Handler) authed(fn func(http.ResponseWriter, *http.Request, Viewer)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, ok := h.viewer(r)
		if !ok {
			if r.Header.Get("Authorization") == "" && strings.Contains(r.Header.Get("Accept"), "text/html") {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="paddock console"`)
			http.Error(w, "unauthenticated: log in at /login, or send Authorization: Bearer TOKEN", http.StatusUnauthorized)
			return
		}
		fn(w, r, v)
	}
}

// sameOrigin refuses a cross-site form post. A browser says where a
// request comes from in Sec-Fetch-Site (same-origin, or none when the
// user acted), or else in Origin, which must name the console itself; a
// client that sends neither is no browser a page could drive.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// login takes a token from the form and, when it names a viewer, starts a
// browser session.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-site login refused", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	v, ok := h.cfg.Tokens.match(r.PostFormValue("token"))
	if !ok {
		h.logger.Warn("console: login refused", "remote", r.RemoteAddr)
		h.render(w, r, http.StatusUnauthorized, "login", nil, errors.New("unknown token"))
		return
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		h.render(w, r, http.StatusInternalServerError, "error", nil, err)
		return
	}
	id := hex.EncodeToString(b[:])
	h.mu.Lock()
	now := time.Now()
	for k, l := range h.logins {
		if now.After(l.expires) {
			delete(h.logins, k)
		}
	}
	for len(h.logins) >= h.cfg.MaxLogins {
		oldest := ""
		for k, l := range h.logins {
			if oldest == "" || l.expires.Before(h.logins[oldest].expires) {
				oldest = k
			}
		}
		delete(h.logins, oldest)
	}
	h.logins[id] = login{v: v, expires: now.Add(h.cfg.SessionTTL)}
	h.mu.Unlock()
	h.logger.Info("console: login", "identity", v.Name, "role", v.Role, "tenant", v.Tenant)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: int(h.cfg.SessionTTL / time.Second)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the browser's session.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-site logout refused", http.StatusForbidden)
		return
	}
	if c, err := r.Cookie(CookieName); err == nil {
		h.mu.Lock()
		delete(h.logins, c.Value)
		h.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// page is what every template gets.
type page struct {
	Viewer *Viewer
	Err    error
	Code   errcode.Code
	Data   any
}

// render executes page name with data; an error shows on the page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, v *Viewer, data any, errs ...error) {
	p := page{Viewer: v, Data: data}
	for _, err := range errs {
		if err != nil {
			p.Err, p.Code = err, errcode.Of(err)
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := h.pages[name].Execute(w, p); err != nil {
		h.logger.Warn("console: render", "page", name, "err", err)
	}
}

// fail renders the error page with the HTTP status of err's code.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, v Viewer, err error) {
	h.render(w, r, statusOf(err), "error", &v, nil, err)
}

// statusOf maps an error's code to an HTTP status.
func statusOf(err error) int {
	switch errcode.Of(err) {
	case errcode.InvalidRequest:
		return http.StatusBadRequest
	case errcode.PermissionDenied:
		return http.StatusForbidden
	case errcode.SessionNotFound, errcode.NotFound:
		return http.StatusNotFound
	case errcode.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// sessionsPage is the data of the sessions page.
type sessionsPage struct {
	Filter   Filter
	Since    string
	Until    string
	Sessions []projection.SessionRecord
	More     bool
	Statuses []projection.Status
}

func (h *Handler) sessions(w http.ResponseWriter, r *http.Request, v Viewer) {
	q := r.URL.Query()
	f := Filter{Tenant: q.Get("tenant"), Status: projection.Status(q.Get("status")), Node: q.Get("node"), Label: q.Get("label"), Deleted: q.Get("deleted") != ""}
	d := sessionsPage{Since: q.Get("since"), Until: q.Get("until"), Statuses: []projection.Status{projection.StatusCreating, projection.StatusRunning,
		projection.StatusStopped, projection.StatusShutDown, projection.StatusLost, projection.StatusDeleted, projection.StatusFailed}}
	var err error
	if f.Since, err = parseTime("since", d.Since); err == nil {
		f.Until, err = parseTime("until", d.Until)
	}
	d.Filter = f
	if err != nil {
		h.render(w, r, http.StatusBadRequest, "sessions", &v, d, err)
		return
	}
	d.Sessions, d.More, err = h.r.Sessions(r.Context(), v, f)
	status := http.StatusOK
	if err != nil {
		status = statusOf(err)
	}
	h.render(w, r, status, "sessions", &v, d, err)
}

// parseTime parses a filter's time: RFC 3339, or the date and minute an
// HTML datetime-local input sends (taken as UTC).
func parseTime(what, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errcode.New(errcode.InvalidRequest, "%s %q is not a time (RFC 3339, or YYYY-MM-DDTHH:MM in UTC)", what, s)
}

// sessionPage is the data of one session's page.
type sessionPage struct {
	Session
	Verify    Verification
	VerifyErr error
}

func (h *Handler) session(w http.ResponseWriter, r *http.Request, v Viewer) {
	tenant, id := r.PathValue("tenant"), r.PathValue("id")
	s, err := h.r.Session(r.Context(), v, tenant, id)
	if err != nil {
		h.fail(w, r, v, err)
		return
	}
	d := sessionPage{Session: s}
	d.Verify, d.VerifyErr = h.r.Verify(r.Context(), v, tenant, id)
	h.render(w, r, http.StatusOK, "session", &v, d)
}

func (h *Handler) nodes(w http.ResponseWriter, r *http.Request, v Viewer) {
	rep, err := h.r.Status(r.Context(), v, h.cfg.StatusWait)
	if err != nil {
		h.fail(w, r, v, err)
		return
	}
	h.render(w, r, http.StatusOK, "nodes", &v, rep)
}

// TailEvent is what the live tail sends for each event (an SSE "data"
// line of JSON).
type TailEvent struct {
	StreamSeq  uint64   `json:"stream_seq"`
	Seq        uint64   `json:"seq,omitempty"`
	TS         string   `json:"ts,omitempty"`
	Op         string   `json:"op,omitempty"`
	Phase      string   `json:"phase,omitempty"`
	OK         *bool    `json:"ok,omitempty"`
	DurationMS *float64 `json:"duration_ms,omitempty"`
	ExitCode   *int     `json:"exit_code,omitempty"`
	ErrorCode  string   `json:"error_code,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// tail streams a session's new events as server-sent events after stream
// seq ?after (or the Last-Event-ID of a reconnecting browser), until the client goes, the tail's bound passes or the
// console closes. At most Config.MaxTails run at once (503 beyond).
func (h *Handler) tail(w http.ResponseWriter, r *http.Request, v Viewer) {
	tenant, id := r.PathValue("tenant"), r.PathValue("id")
	if err := checkSession(v, tenant, id); err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	var after uint64
	// A browser's EventSource that reconnects says where it was
	// (Last-Event-ID, the id of the last event it got): it goes on from
	// there rather than from the page's ?after.
	s := r.Header.Get("Last-Event-ID")
	if s == "" {
		s = r.URL.Query().Get("after")
	}
	if s != "" {
		var err error
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			http.Error(w, "after is not a stream sequence", http.StatusBadRequest)
			return
		}
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	select {
	case h.tails <- struct{}{}:
		defer func() { <-h.tails }()
	default:
		http.Error(w, "too many live tails", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.TailFor)
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": tail\n\n")
	fl.Flush()
	err := h.r.Tail(ctx, v, tenant, id, after, func(m events.Msg) error {
		te := TailEvent{StreamSeq: m.StreamSeq}
		if ev, err := m.Decode(); err != nil {
			te.Error = err.Error()
		} else {
			te.Seq, te.TS, te.Op, te.Phase = ev.Seq, ev.TS.UTC().Format(time.RFC3339Nano), ev.Op, string(ev.Phase)
			te.OK, te.DurationMS, te.ExitCode, te.ErrorCode = ev.OK, ev.DurationMS, ev.ExitCode, ev.ErrorCode
		}
		b, err := json.Marshal(te)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", m.StreamSeq, b); err != nil {
			return err
		}
		fl.Flush()
		return nil
	})
	if err != nil && ctx.Err() == nil {
		h.logger.Warn("console: tail", "tenant", tenant, "session", id, "err", err)
	}
}

// CheckListen returns addr when it is a loopback HOST:PORT, or any
// address with remote set (behind a TLS proxy: tokens and cookies cross
// the wire in clear otherwise). Anything else is invalid_request.
func CheckListen(addr string, remote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return errcode.New(errcode.InvalidRequest, "--console-addr %q is not HOST:PORT", addr)
	}
	if remote {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return errcode.New(errcode.InvalidRequest, "--console-addr %s is not a loopback address: the console over plain HTTP sends tokens and cookies in clear; serve on 127.0.0.1 behind a TLS proxy, or pass --console-allow-remote", addr)
}

// Server serves a Handler on an address from Start to Close.
type Server struct {
	addr   string
	h      http.Handler
	logger *slog.Logger
	srv    *http.Server
	ln     net.Listener
	cancel context.CancelFunc
	done   chan struct{}
}

// NewServer returns a server of h on addr (see CheckListen).
func NewServer(addr string, h http.Handler, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{addr: addr, h: h, logger: logger}
}

// Start listens and serves in the background; it fails when it cannot
// listen.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("console: listen %s: %w", s.addr, err)
	}
	// The requests' base context outlives Start's: Close cancels it, so
	// that live tails end before Shutdown waits for them.
	base, cancel := context.WithCancel(context.Background())
	s.ln, s.cancel, s.done = ln, cancel, make(chan struct{})
	s.srv = &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		BaseContext: func(net.Listener) context.Context { return base }}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("console: serve", "err", err)
		}
	}()
	s.logger.Info("console: serving", "url", "http://"+ln.Addr().String()+"/")
	return nil
}

// Addr is the address the server listens on (after Start).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close ends the live tails, then shuts the server down within ctx. It is
// safe to call twice, and before Start.
func (s *Server) Close(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	s.cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
