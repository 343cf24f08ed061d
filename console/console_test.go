package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/console"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

func errf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// forge appends an unsigned event with a wrong prev_hash to session id of
// tenant default, as someone with write access to the stream could, and
// returns its stream seq.
func forge(t *testing.T, w *world, id string) uint64 {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	last, err := w.st.Log.Last(ctx, "default", id)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.Event{Version: events.Version, EventID: "forged", TS: time.Now(), Tenant: "default", SessionID: id,
		Seq: last.Event.Seq + 1, Op: "exec", Phase: events.PhaseStart, SpanID: "forged-span", PrevHash: strings.Repeat("0", 64),
		Data: json.RawMessage(`{"argv":["rm","-rf","/evidence"],"timeout_ms":1}`)}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := w.st.JS.Publish(ctx, w.st.Log.Subjects().Session("default", id, "exec", events.PhaseStart), b)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// TestConsole drives the console over a real Paddock: sessions of two
// tenants made by real ops on the local runtime, and the attacks of
// docs/security.md ("The console") that must fail.
func TestConsole(t *testing.T) {
	w := startWorld(t, console.Config{})
	forged := forge(t, w, w.failing)

	t.Run("unauthenticated", func(t *testing.T) {
		for _, tok := range []string{"", "wrong-token-" + strings.Repeat("x", 40), "short", "a1a1"} {
			if code, _ := w.get(t, "/", tok); code != http.StatusUnauthorized {
				t.Errorf("token %q: status %d, want 401", tok, code)
			}
			if code, body := w.get(t, "/s/default/"+w.alice, tok); code != http.StatusUnauthorized || strings.Contains(body, w.alice) {
				t.Errorf("token %q on a session: status %d, want 401 without the session", tok, code)
			}
		}
		// A browser without a login goes to the login page.
		req, _ := http.NewRequest(http.MethodGet, w.srv.URL+"/", nil)
		req.Header.Set("Accept", "text/html")
		c := *w.srv.Client()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login" {
			t.Errorf("browser without login: %d to %q, want 303 to /login", res.StatusCode, res.Header.Get("Location"))
		}
	})

	t.Run("sessions by tenant", func(t *testing.T) {
		_, admin := w.get(t, "/", adminToken)
		for _, id := range []string{w.alice, w.evil, w.child} {
			if !strings.Contains(admin, id) {
				t.Errorf("admin's sessions lack %s", id)
			}
		}
		for _, c := range []struct {
			name, token, sees, not string
		}{{"alice", aliceToken, w.alice, w.evil}, {"auditor", auditorToken, w.alice, w.evil}, {"mallory", malloryToken, w.evil, w.alice}} {
			code, body := w.get(t, "/", c.token)
			if code != http.StatusOK || !strings.Contains(body, c.sees) || strings.Contains(body, c.not) {
				t.Errorf("%s's sessions: status %d, has %s: %v, has %s: %v; want 200 with only its tenant's", c.name, code,
					c.sees, strings.Contains(body, c.sees), c.not, strings.Contains(body, c.not))
			}
		}
		// Mallory asks for tenant default by filter.
		if code, body := w.get(t, "/?tenant=default", malloryToken); code != http.StatusForbidden || strings.Contains(body, w.alice) {
			t.Errorf("mallory's ?tenant=default: status %d, want 403 without alice's session", code)
		}
	})

	t.Run("filters", func(t *testing.T) {
		cases := []struct {
			query    string
			has, not []string
		}{
			{"?label=team%3Dblue", []string{w.alice}, []string{w.failing, w.evil}},
			{"?label=team%3Dblue&tenant=default", []string{w.alice}, []string{w.failing}},
			{"?tenant=evil", []string{w.evil}, []string{w.alice}},
			{"?status=running&node=node-1", []string{w.alice, w.evil}, nil},
			{"?node=elsewhere", nil, []string{w.alice, w.evil}},
			{"?status=deleted", nil, []string{w.alice}},
			{"?since=2000-01-01T00:00", []string{w.alice}, nil},
			{"?until=2000-01-01", nil, []string{w.alice, w.evil}},
		}
		for _, c := range cases {
			code, body := w.get(t, "/"+c.query, adminToken)
			if code != http.StatusOK {
				t.Errorf("%s: status %d, want 200", c.query, code)
			}
			for _, id := range c.has {
				if !strings.Contains(body, id) {
					t.Errorf("%s lacks %s", c.query, id)
				}
			}
			for _, id := range c.not {
				if strings.Contains(body, id) {
					t.Errorf("%s lists %s", c.query, id)
				}
			}
		}
		for _, q := range []string{"?since=yesterday", "?label=nokey", "?tenant=a.b"} {
			if code, body := w.get(t, "/"+q, adminToken); code != http.StatusBadRequest || !strings.Contains(body, "invalid_request") {
				t.Errorf("%s: status %d, want 400 invalid_request", q, code)
			}
		}
	})

	t.Run("timeline", func(t *testing.T) {
		code, body := w.get(t, "/s/default/"+w.alice, aliceToken)
		if code != http.StatusOK {
			t.Fatalf("status %d, want 200: %s", code, body)
		}
		for _, want := range []string{
			`data-op="create"`, `data-op="exec"`, `data-op="write"`, `data-op="fork"`,
			`<td class="exit">3</td>`, // the exec's exit code
			`notes/a.txt`,             // the write's path
			`created:notes/a.txt`,     // what the write made (exact; an exec's watch may miss a file on a loaded machine)
			`<a href="/s/default/` + w.child + `">`,
			`id="audit"><strong>verified</strong>`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("timeline lacks %q", want)
			}
		}
		// The child names its parent.
		if _, child := w.get(t, "/s/default/"+w.child, aliceToken); !strings.Contains(child, `forked from <a href="/s/default/`+w.alice+`">`) {
			t.Errorf("the child's page does not link its parent")
		}
	})

	t.Run("escaped", func(t *testing.T) {
		for _, path := range []string{"/", "/s/default/" + w.alice} {
			_, body := w.get(t, path, aliceToken)
			if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
				t.Errorf("%s renders the payload as markup", path)
			}
			if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;") {
				t.Errorf("%s does not show the payload as text", path)
			}
		}
	})

	t.Run("audit failure", func(t *testing.T) {
		_, body := w.get(t, "/s/default/"+w.failing, aliceToken)
		want := fmt.Sprintf(`<span id="failed-seq">%d</span>`, forged)
		if !strings.Contains(body, "<strong>FAIL</strong>") || !strings.Contains(body, want) {
			t.Errorf("forged session's page: want FAIL at stream seq %d (%s)", forged, want)
		}
	})

	t.Run("other tenant", func(t *testing.T) {
		for _, p := range []string{"/s/default/" + w.alice, "/s/default/" + w.alice + "/tail", "/s/default/" + w.child} {
			code, body := w.get(t, p, malloryToken)
			if code != http.StatusNotFound || strings.Contains(body, "sh -c") || strings.Contains(body, "notes/a.txt") {
				t.Errorf("mallory GET %s: status %d, want 404 showing nothing", p, code)
			}
		}
		// The same answer as for a session that does not exist.
		if code, _ := w.get(t, "/s/evil/no-such-session", malloryToken); code != http.StatusNotFound {
			t.Errorf("a missing session: status %d, want 404", code)
		}
		// And an auditor of default sees default's, not evil's.
		if code, _ := w.get(t, "/s/evil/"+w.evil, auditorToken); code != http.StatusNotFound {
			t.Errorf("auditor of default on evil's session: status %d, want 404", code)
		}
		if code, _ := w.get(t, "/s/default/"+w.alice, auditorToken); code != http.StatusOK {
			t.Errorf("auditor of default on default's session: status %d, want 200", code)
		}
	})

	t.Run("path traversal", func(t *testing.T) {
		for _, p := range []string{
			"/s/default%2F..%2Fevil/" + w.evil, "/s/evil/..%2F" + w.alice, "/s/../evil/" + w.evil,
			"/s/evil.%2A/x", "/s/%3E/x", "/static/../console.go", "/static/..%2Fconsole.go", "/static/%2e%2e/server.go",
		} {
			req, _ := http.NewRequest(http.MethodGet, w.srv.URL+p, nil)
			req.Header.Set("Authorization", "Bearer "+malloryToken)
			c := *w.srv.Client()
			c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			code, body := do(t, &c, req)
			if code == http.StatusOK || strings.Contains(body, "data-op=") || strings.Contains(body, "package console") {
				t.Errorf("GET %s: status %d, want a refusal showing nothing", p, code)
			}
		}
	})

	t.Run("nodes", func(t *testing.T) {
		code, body := w.get(t, "/nodes", adminToken)
		if code != http.StatusOK || !strings.Contains(body, "<td>node-1</td>") || !strings.Contains(body, "<td>SBX_EVENTS</td>") {
			t.Errorf("admin's nodes page: status %d, want 200 with node-1 and the events stream", code)
		}
		for _, tok := range []string{aliceToken, auditorToken, malloryToken} {
			if code, body := w.get(t, "/nodes", tok); code != http.StatusForbidden || strings.Contains(body, "node-1") {
				t.Errorf("a tenant's nodes page: status %d, want 403", code)
			}
		}
	})

	t.Run("login", func(t *testing.T) {
		c := *w.srv.Client()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		crossSite := false
		post := func(path, origin, token string, cookie *http.Cookie) *http.Response {
			req, _ := http.NewRequest(http.MethodPost, w.srv.URL+path, strings.NewReader(url.Values{"token": {token}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if origin != "" {
				req.Header.Set("Origin", origin)
			}
			if crossSite {
				req.Header.Set("Sec-Fetch-Site", "cross-site")
			}
			if cookie != nil {
				req.AddCookie(cookie)
			}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res
		}
		if res := post("/login", w.srv.URL, "not-a-token-"+strings.Repeat("z", 40), nil); res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
			t.Errorf("login with a wrong token: %d with cookies %v, want 401 and none", res.StatusCode, res.Cookies())
		}
		if res := post("/login", "http://evil.example", aliceToken, nil); res.StatusCode != http.StatusForbidden || len(res.Cookies()) != 0 {
			t.Errorf("cross-site login: %d, want 403 and no cookie", res.StatusCode)
		}
		crossSite = true
		if res := post("/login", "", aliceToken, nil); res.StatusCode != http.StatusForbidden || len(res.Cookies()) != 0 {
			t.Errorf("login with Sec-Fetch-Site cross-site: %d, want 403 and no cookie", res.StatusCode)
		}
		crossSite = false
		res := post("/login", w.srv.URL, aliceToken, nil)
		if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
			t.Fatalf("login: %d with cookies %v, want 303 and one", res.StatusCode, res.Cookies())
		}
		ck := res.Cookies()[0]
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Value == aliceToken {
			t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, not the token", ck)
		}
		withCookie := func(ck *http.Cookie) (int, string) {
			req, _ := http.NewRequest(http.MethodGet, w.srv.URL+"/", nil)
			req.AddCookie(ck)
			return do(t, &c, req)
		}
		if code, body := withCookie(ck); code != http.StatusOK || !strings.Contains(body, w.alice) || strings.Contains(body, w.evil) {
			t.Errorf("with the login's cookie: status %d, want 200 with alice's sessions only", code)
		}
		if code, _ := withCookie(&http.Cookie{Name: console.CookieName, Value: strings.Repeat("0", 64)}); code != http.StatusUnauthorized {
			t.Errorf("a made-up cookie: status %d, want 401", code)
		}
		post("/logout", w.srv.URL, "", ck)
		if code, _ := withCookie(ck); code != http.StatusUnauthorized {
			t.Errorf("the cookie after logout: status %d, want 401", code)
		}
	})
}

// TestTail follows a session's events as they are stored, and shows that
// a tail ends when its client goes: with room for one tail, a second can
// start once the first client has gone.
func TestTail(t *testing.T) {
	w := startWorld(t, console.Config{MaxTails: 1})
	ctx := testenv.Context(t, 30*time.Second)
	open := func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.srv.URL+"/s/default/"+w.alice+"/tail", nil)
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		return w.srv.Client().Do(req)
	}
	tctx, cancel := context.WithCancel(ctx)
	res, err := open(tctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("tail: %d %s, want 200 text/event-stream", res.StatusCode, res.Header.Get("Content-Type"))
	}
	// Room for one: a second is refused while the first runs.
	if res2, err := open(ctx); err != nil || res2.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a second tail: %v %v, want 503", res2.StatusCode, err)
	} else {
		res2.Body.Close()
	}
	if _, err := w.st.Client.Exec(ctx, w.alice, commands.ExecArgs{Argv: []string{"echo", "tailed"}}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	var got []console.TailEvent
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var te console.TailEvent
		if err := json.Unmarshal([]byte(line), &te); err != nil {
			t.Fatalf("tail line %q: %v", line, err)
		}
		got = append(got, te)
		if te.Op == "exec" && te.Phase == "finish" && te.ExitCode != nil && *te.ExitCode == 0 {
			break
		}
	}
	if len(got) == 0 || got[len(got)-1].Phase != "finish" {
		t.Fatalf("tail delivered %+v, want the whole history up to the new exec's finish (scan: %v)", got, sc.Err())
	}
	if got[0].Op != "create" || got[0].Phase != "start" {
		t.Errorf("tail from the start begins with %+v, want the create's start", got[0])
	}
	cancel()
	res.Body.Close()
	testenv.Eventually(t, 10*time.Second, func() error {
		res, err := open(ctx)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return errf("a tail after the first client went: status %d", res.StatusCode)
		}
		return nil
	})
	// A reconnecting browser goes on after its Last-Event-ID: the first
	// event it gets is the one after.
	last := got[len(got)-1].StreamSeq
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, w.srv.URL+"/s/default/"+w.alice+"/tail?after=0", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Last-Event-ID", fmt.Sprint(got[len(got)-2].StreamSeq))
	// The one tail's room is free once the server has seen the previous
	// client go.
	testenv.Eventually(t, 10*time.Second, func() error {
		if res, err = w.srv.Client().Do(req); err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK {
			res.Body.Close()
			return errf("reconnecting tail: status %d", res.StatusCode)
		}
		return nil
	})
	sc = bufio.NewScanner(res.Body)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var te console.TailEvent
			if err := json.Unmarshal([]byte(line), &te); err != nil || te.StreamSeq != last {
				t.Errorf("after Last-Event-ID the tail sent %s, want stream seq %d first", line, last)
			}
			break
		}
	}
	rcancel()
	res.Body.Close()
	// A tail of another tenant's session is refused before it starts.
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, w.srv.URL+"/s/default/"+w.alice+"/tail", nil)
	req.Header.Set("Authorization", "Bearer "+malloryToken)
	if code, _ := do(t, w.srv.Client(), req); code != http.StatusNotFound {
		t.Errorf("mallory's tail of alice's session: status %d, want 404", code)
	}
}
