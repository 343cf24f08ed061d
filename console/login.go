package console

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
)

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
