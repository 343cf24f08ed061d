package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/console"
	"github.com/paddock-dev/paddock/testenv"
)

// artifacts is where the browser test saves its screenshots:
// $PADDOCK_ARTIFACTS/console when set, else a temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if a := os.Getenv("PADDOCK_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "console")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBrowser drives the console in headless Chromium (Debian's
// chromium, through chromedp): a client logs in and sees its session's
// history (timeline, audit, a live tail that the console's script fills
// under the strict CSP), no payload in a label or argv runs, and a client
// of another tenant sees none of it. Screenshots are saved (artifacts).
func TestBrowser(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium is not installed (apt-get install -y chromium; .ci/run does): %v", err)
		}
		t.Skip("chromium is not installed")
	}
	w := startWorld(t, console.Config{})
	dir := artifacts(t)
	t.Logf("screenshots in %s", dir)

	// The browser's profile: removed once the browser and its helpers have
	// let go of it (they may still write for a moment after it exits).
	profile, err := os.MkdirTemp("", "console-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.Eventually(t, 10*time.Second, func() error { return os.RemoveAll(profile) }) })
	alloc, cancelAlloc := chromedp.NewExecAllocator(testenv.Context(t, 90*time.Second),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.UserDataDir(profile), chromedp.WindowSize(1400, 900))...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	// A payload that ran would open a dialog.
	dialogs := make(chan string, 8)
	chromedp.ListenTarget(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			select {
			case dialogs <- d.Message:
			default:
			}
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var buf []byte // quality 100: a PNG
			if err := chromedp.FullScreenshot(&buf, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, name), buf, 0o644)
		})
	}
	login := func(token string) chromedp.Tasks {
		return chromedp.Tasks{
			chromedp.Navigate(w.srv.URL + "/login"),
			chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", token, chromedp.ByID),
			chromedp.Submit("#token", chromedp.ByID),
			chromedp.WaitVisible("#sessions", chromedp.ByID),
		}
	}

	var sessions, labels, viewer string
	if err := chromedp.Run(ctx, login(aliceToken),
		chromedp.OuterHTML("#sessions", &sessions, chromedp.ByID),
		chromedp.Text("#sessions td.labels", &labels, chromedp.ByQuery),
		chromedp.Text("#viewer", &viewer, chromedp.ByID),
		shot("sessions.png"),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sessions, w.alice) || strings.Contains(sessions, w.evil) {
		t.Errorf("alice's sessions page: has hers %v, has evil's %v; want only hers", strings.Contains(sessions, w.alice), strings.Contains(sessions, w.evil))
	}
	if !strings.Contains(viewer, "tenant default") {
		t.Errorf("viewer %q, want tenant default", viewer)
	}

	var timeline, audit string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(w.srv.URL+"/s/default/"+w.alice),
		chromedp.WaitVisible("#timeline", chromedp.ByID),
		chromedp.Text("#timeline", &timeline, chromedp.ByID),
		chromedp.Text("#audit", &audit, chromedp.ByID),
	); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"create", "exec", "write", "fork", "notes/a.txt", "created:notes/a.txt", xss} {
		if !strings.Contains(timeline, want) {
			t.Errorf("the timeline as the browser shows it lacks %q", want)
		}
	}
	if !strings.HasPrefix(audit, "verified") {
		t.Errorf("audit %q, want verified", audit)
	}
	// The live tail: an op after the page loaded shows up in it.
	if _, err := w.st.Client.Exec(testenv.Context(t, 20*time.Second), w.alice, commands.ExecArgs{Argv: []string{"echo", "live"}}); err != nil {
		t.Fatal(err)
	}
	var tail string
	if err := chromedp.Run(ctx,
		chromedp.WaitVisible("#tail tr.tail-event:nth-child(2)", chromedp.ByQuery),
		chromedp.Text("#tail tbody", &tail, chromedp.ByQuery),
		shot("session.png"),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tail, "exec") || !strings.Contains(tail, "finish") {
		t.Errorf("live tail %q, want the new exec's start and finish", tail)
	}

	// Mallory, of tenant evil, in the same browser after alice logs out.
	var denied, evilSessions string
	if err := chromedp.Run(ctx,
		chromedp.Click("form.who button", chromedp.ByQuery),
		chromedp.WaitVisible("#login", chromedp.ByID),
		login(malloryToken),
		chromedp.OuterHTML("#sessions", &evilSessions, chromedp.ByID),
		chromedp.Navigate(w.srv.URL+"/s/default/"+w.alice),
		chromedp.WaitVisible("#error", chromedp.ByID),
		chromedp.Text("main", &denied, chromedp.ByQuery),
		shot("other-tenant.png"),
	); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(evilSessions, w.alice) || !strings.Contains(evilSessions, w.evil) {
		t.Errorf("mallory's sessions page: want evil's session only")
	}
	if !strings.Contains(denied, "session_not_found") || strings.Contains(denied, "notes/a.txt") {
		t.Errorf("mallory on alice's session sees %q, want session_not_found and nothing of it", denied)
	}
	select {
	case m := <-dialogs:
		t.Errorf("a payload ran in the browser: dialog %q", m)
	default:
	}
	for _, f := range []string{"sessions.png", "session.png", "other-tenant.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("screenshot %s: %v", f, err)
		}
	}
}
