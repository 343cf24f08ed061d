package cluster_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/cluster"
	"github.com/paddock-dev/paddock/errcode"
)

// TestSitesValidate: what sites may be; each refusal is invalid_request.
func TestSitesValidate(t *testing.T) {
	site := cluster.Site{Name: "lab", Host: "127.0.0.1", Port: 4300}
	for _, c := range []struct {
		name string
		edit func(*cluster.Spec)
		ok   bool
	}{
		{"a site", func(s *cluster.Spec) { s.LeafPort, s.Sites = 7422, []cluster.Site{site} }, true},
		{"a leaf port, no site", func(s *cluster.Spec) { s.LeafPort = 7422 }, true},
		{"a site without a leaf port", func(s *cluster.Spec) { s.Sites = []cluster.Site{site} }, false},
		{"leaf ports over the client ports", func(s *cluster.Spec) { s.LeafPort = 4224 }, false},
		{"leaf ports past 65535", func(s *cluster.Spec) { s.LeafPort = 65534 }, false},
		{"a bad site name", func(s *cluster.Spec) {
			s.LeafPort, s.Sites = 7422, []cluster.Site{{Name: "a b", Host: "127.0.0.1", Port: 1}}
		}, false},
		{"a site twice", func(s *cluster.Spec) { s.LeafPort, s.Sites = 7422, []cluster.Site{site, site} }, false},
		{"a site port of 0", func(s *cluster.Spec) {
			s.LeafPort, s.Sites = 7422, []cluster.Site{{Name: "lab", Host: "127.0.0.1"}}
		}, false},
		{"a site beyond loopback in clear", func(s *cluster.Spec) {
			s.LeafPort, s.Sites = 7422, []cluster.Site{{Name: "lab", Host: "10.0.0.9", Port: 4300}}
		}, false},
		{"a site beyond loopback with TLS", func(s *cluster.Spec) {
			s.LeafPort, s.TLS, s.Sites = 7422, true, []cluster.Site{{Name: "lab", Host: "10.0.0.9", Port: 4300}}
		}, true},
	} {
		s := threeOnLoopback()
		c.edit(&s)
		err := s.Validate()
		if c.ok != (err == nil) || err != nil && !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("%s: got %v, want ok %v (else invalid_request)", c.name, err, c.ok)
		}
	}
	for _, v := range []string{"lab", "lab=127.0.0.1", "=127.0.0.1:1:2", "lab=127.0.0.1:x", "lab=127.0.0.1:+4", "lab=host:4300x"} {
		if _, err := cluster.ParseSite(v); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("ParseSite(%q): %v; want invalid_request", v, err)
		}
	}
	if got, err := cluster.ParseSite("lab=h.example:4300"); err != nil || got != (cluster.Site{Name: "lab", Host: "h.example", Port: 4300}) {
		t.Errorf("ParseSite: %+v, %v", got, err)
	}
}

// TestSiteConfs: with TLS, a core server's leaf listener wants the leaf
// user, its secret and a certificate of the CA; a site's config keeps no
// JetStream and links to every core server with its own certificate.
func TestSiteConfs(t *testing.T) {
	dir := t.TempDir()
	s := threeOnLoopback()
	s.TLS, s.TLSDir, s.LeafPort = true, dir, 7422
	s.Sites = []cluster.Site{{Name: "lab", Host: "127.0.0.1", Port: 4300}}
	files, err := s.Material(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.LeafSecret) < 32 || strings.TrimSpace(string(files["leaf.secret"])) != s.LeafSecret || s.LeafSecret == s.RouteSecret {
		t.Fatalf("leaf secret %q, file %q: want its own secret, written", s.LeafSecret, files["leaf.secret"])
	}
	if files["pd-site-lab.pem"] == nil || files["pd-site-lab-key.pem"] == nil {
		t.Fatalf("no certificate for the site's leaf server among %d files", len(files))
	}
	var b strings.Builder
	if err := s.Confs()[2].Write(&b, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`listen: "127.0.0.1:7424"`, `user: "leaf", password: "` + s.LeafSecret + `", account: "PADDOCK"`, "verify: true"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("server 3's config lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	site := s.SiteConfs()[0]
	if err := site.Write(&b, nil); err != nil {
		t.Fatal(err)
	}
	conf := b.String()
	if strings.Contains(conf, "jetstream") || !strings.Contains(conf, `account: "PADDOCK"`) || !strings.Contains(conf, "pd-site-lab.pem") {
		t.Errorf("site config: want no JetStream, the PADDOCK account linked, its own certificate:\n%s", conf)
	}
	for _, port := range []string{"7422", "7423", "7424"} {
		if !strings.Contains(conf, "nats-leaf://leaf:"+s.LeafSecret+"@127.0.0.1:"+port) {
			t.Errorf("site config does not link to port %s:\n%s", port, conf)
		}
	}
	if got := s.SiteURL(s.Sites[0]); got != "nats://127.0.0.1:4300" {
		t.Errorf("site URL %q", got)
	}
}
