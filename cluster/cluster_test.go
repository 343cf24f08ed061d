package cluster_test

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddock-dev/paddock/cluster"
	"github.com/paddock-dev/paddock/errcode"
)

func threeOnLoopback() cluster.Spec {
	return cluster.Spec{Servers: 3, Hosts: []string{"127.0.0.1"}, ClientPort: 4222, RoutePort: 6222, Name: "pd", StoreDir: "/var/js"}
}

// TestSpecValidate: what a spec may be; each refusal is invalid_request.
func TestSpecValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*cluster.Spec)
		ok   bool
	}{
		{"three on loopback", func(*cluster.Spec) {}, true},
		{"no servers", func(s *cluster.Spec) { s.Servers = 0 }, false},
		{"bad name", func(s *cluster.Spec) { s.Name = "a b" }, false},
		{"two hosts for three", func(s *cluster.Spec) { s.Hosts = []string{"a", "b"} }, false},
		{"overlapping ports", func(s *cluster.Spec) { s.RoutePort = 4223 }, false},
		{"beyond loopback in clear", func(s *cluster.Spec) { s.ListenHost = "0.0.0.0" }, false},
		{"beyond loopback with TLS", func(s *cluster.Spec) { s.ListenHost, s.TLS = "0.0.0.0", true }, true},
		{"beyond loopback, insecure", func(s *cluster.Spec) { s.ListenHost, s.Insecure = "0.0.0.0", true }, true},
		{"TLS and insecure", func(s *cluster.Spec) { s.TLS, s.TLSSet, s.Insecure = true, true, true }, false},
	} {
		s := threeOnLoopback()
		c.edit(&s)
		err := s.Validate()
		if c.ok != (err == nil) || err != nil && !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("%s: got %v, want ok %v (else invalid_request)", c.name, err, c.ok)
		}
	}
}

// TestMaterialAndConfs: a TLS spec gets a route secret, a CA and a
// certificate per server naming its host; a second run keeps them; each
// server's config routes to all three with the secret and mutual TLS.
func TestMaterialAndConfs(t *testing.T) {
	dir := t.TempDir()
	s := threeOnLoopback()
	s.TLS, s.TLSDir = true, dir
	now := time.Now()
	files, err := s.Material(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"route.secret", cluster.CACertFile, "ca-key.pem", "pd-1.pem", "pd-1-key.pem", "pd-3.pem"} {
		if len(files[f]) == 0 {
			t.Errorf("no %s among the material", f)
		}
	}
	if s.RouteSecret == "" || strings.TrimSpace(string(files["route.secret"])) != s.RouteSecret {
		t.Fatalf("route secret %q, file %q: want the same, set", s.RouteSecret, files["route.secret"])
	}
	blk, _ := pem.Decode(files["pd-2.pem"])
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || len(cert.IPAddresses) == 0 || !cert.IPAddresses[0].IsLoopback() {
		t.Fatalf("pd-2's certificate: %v, %v; want it to name 127.0.0.1", cert.IPAddresses, err)
	}
	for name, b := range files {
		if err := cluster.WriteSecret(filepath.Join(dir, name), b); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca-key.pem: %v, %v; want mode 0600", fi, err)
	}
	again := s
	more, err := again.Material(dir, now)
	if err != nil || len(more) != 0 || again.RouteSecret != s.RouteSecret {
		t.Fatalf("second run: %d new files, secret kept %v, %v; want nothing new", len(more), again.RouteSecret == s.RouteSecret, err)
	}
	confs := s.Confs()
	if len(confs) != 3 || confs[1].ServerName != "pd-2" || confs[1].Port != 4223 {
		t.Fatalf("confs %+v: want three, the second pd-2 on 4223", confs)
	}
	var b bytes.Buffer
	if err := confs[0].Write(&b, nil); err != nil {
		t.Fatal(err)
	}
	conf := b.String()
	for _, want := range []string{"pd-1", "nats-route://route:" + s.RouteSecret + "@127.0.0.1:6224", "verify: true", "sync_interval: always"} {
		if !strings.Contains(conf, want) {
			t.Errorf("pd-1's config lacks %q:\n%s", want, conf)
		}
	}
	if got := s.ClientURLs(); got != "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224" {
		t.Errorf("client URLs %q", got)
	}
}

// TestServerConfRefusesQuotes: a path the config syntax cannot carry is
// invalid_request, and nothing is written.
func TestServerConfRefusesQuotes(t *testing.T) {
	var b bytes.Buffer
	err := cluster.ServerConf{Host: "127.0.0.1", Port: 4222, StoreDir: `/tmp/a"b`}.Write(&b, nil)
	if !errors.Is(err, errcode.ErrInvalidRequest) || b.Len() != 0 {
		t.Fatalf("got %v and %d bytes, want invalid_request and nothing", err, b.Len())
	}
}
