package console

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/paddock-dev/paddock/errcode"
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
