package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// The cluster's edges (docs/security.md, "Cluster edges"). `engine
// cluster config` makes the material the servers need to know one
// another and nobody else, in its --out directory, every file 0600:
//
//	route.secret          the route password (hex of 32 random bytes)
//	ca.pem, ca-key.pem    the cluster's own CA (the key stays with the operator)
//	<name>.pem, -key.pem  server <name>'s certificate and key, signed by the CA
//
// A second run in the same directory keeps what is there (the servers
// keep knowing one another across a reload); a server's certificate is
// made again only when it does not name the server's hosts, is not the
// CA's, or is near its end.

const (
	// routeUser is the user name every route authenticates as.
	routeUser = "route"
	// routeSecretFile holds the route password.
	routeSecretFile = "route.secret"
	// CACertFile is the cluster CA's certificate, which clients trust.
	CACertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
	// caLife and certLife are how long a CA and a server certificate are
	// valid; certRenew is how close to its end a certificate is made again.
	caLife    = 10 * 365 * 24 * time.Hour
	certLife  = 2 * 365 * 24 * time.Hour
	certRenew = 30 * 24 * time.Hour
)

// loadSecret returns the password kept in dir/file (the route's, the
// leaf links'), made when dir has none: then it is put in files, to be
// written.
func loadSecret(dir, file string, files map[string][]byte) (string, error) {
	path := filepath.Join(dir, file)
	b, err := os.ReadFile(path)
	if err != nil {
		err = notExistOr(err, path)
	}
	if err == nil {
		s := strings.TrimSpace(string(b))
		if len(s) < 32 || strings.ContainsAny(s, "\"\\@:/ \t") {
			return "", errcode.New(errcode.InvalidRequest, "%s: not a %s secret engine cluster config wrote (remove it to make a new one, then give every server the new configs)", path, strings.TrimSuffix(file, ".secret"))
		}
		return s, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", errcode.Wrap(errcode.Internal, err, file)
	}
	s := hex.EncodeToString(raw)
	files[file] = []byte(s + "\n")
	return s, nil
}

// clusterCA is the cluster's CA: its certificate and key.
type clusterCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// loadOrMakeCA returns the CA kept in dir, made when dir has none: then
// its files are put in files, to be written.
func loadOrMakeCA(dir, cluster string, now time.Time, files map[string][]byte) (*clusterCA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, caKeyFile)
	cert, key, err := readPair(certPath, keyPath)
	if err == nil {
		if !cert.IsCA || now.After(cert.NotAfter) {
			return nil, errcode.New(errcode.InvalidRequest, "%s is not a CA, or has expired: remove %s and %s to make a new one", certPath, CACertFile, caKeyFile)
		}
		return &clusterCA{cert: cert, key: key}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "CA key")
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{Organization: []string{"Paddock"}, CommonName: "Paddock cluster CA " + cluster},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "CA certificate")
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "CA certificate")
	}
	if err := putPair(files, CACertFile, caKeyFile, der, key); err != nil {
		return nil, err
	}
	return &clusterCA{cert: cert, key: key}, nil
}

// serverCert makes sure dir holds a certificate for server name, signed
// by ca, naming every one of hosts (names and addresses), for both ends
// of a TLS connection (a route is both): it keeps one that does, else
// puts a new one and its key in files, to be written.
func (ca *clusterCA) serverCert(dir, name string, hosts []string, now time.Time, files map[string][]byte) error {
	certName, keyName := serverCertFiles(name)
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if cert, _, err := readPair(certPath, keyPath); err == nil && ca.fits(cert, hosts, now) {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return errcode.Wrap(errcode.Internal, err, "server key")
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{Organization: []string{"Paddock"}, CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return errcode.Wrap(errcode.Internal, err, "certificate of "+name)
	}
	return putPair(files, certName, keyName, der, key)
}

// serverCertFiles are the names of server name's certificate and key.
func serverCertFiles(name string) (cert, key string) {
	return name + ".pem", name + "-key.pem"
}

// fits says whether cert is ca's, valid past the renewal margin, and
// names every host.
func (ca *clusterCA) fits(cert *x509.Certificate, hosts []string, now time.Time) bool {
	if cert.CheckSignatureFrom(ca.cert) != nil || now.Add(certRenew).After(cert.NotAfter) {
		return false
	}
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// certHosts are the names a server's certificate carries: its host, the
// address it listens on when that is one address, and this machine's
// loopback names (for a client on the server's own host).
func certHosts(host, listen string) []string {
	hosts := []string{host}
	if ip := net.ParseIP(listen); ip != nil && !ip.IsUnspecified() {
		hosts = append(hosts, listen)
	}
	hosts = append(hosts, "localhost", "127.0.0.1", "::1")
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// serial returns a random certificate serial number.
func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "certificate serial")
	}
	return n, nil
}

// readPair reads a PEM certificate and its PEM EC key. A missing file is
// fs.ErrNotExist; anything else wrong is invalid_request.
func readPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, notExistOr(err, certPath)
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, notExistOr(err, keyPath)
	}
	bad := func(path string) error {
		return errcode.New(errcode.InvalidRequest, "%s is not a PEM file engine cluster config wrote: remove it to make a new one", path)
	}
	cblock, _ := pem.Decode(cb)
	if cblock == nil || cblock.Type != "CERTIFICATE" {
		return nil, nil, bad(certPath)
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, nil, bad(certPath)
	}
	kblock, _ := pem.Decode(kb)
	if kblock == nil || kblock.Type != "EC PRIVATE KEY" {
		return nil, nil, bad(keyPath)
	}
	key, err := x509.ParseECPrivateKey(kblock.Bytes)
	if err != nil || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, bad(keyPath)
	}
	return cert, key, nil
}

// notExistOr returns fs.ErrNotExist for a file that is not there (or
// whose directory is not: the write that follows says what is wrong),
// else invalid_request.
func notExistOr(err error, path string) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fs.ErrNotExist
	}
	return errcode.Wrap(errcode.InvalidRequest, err, "read "+path)
}

// putPair puts a certificate and its key, PEM, in files.
func putPair(files map[string][]byte, certName, keyName string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return errcode.Wrap(errcode.Internal, err, "marshal key")
	}
	files[keyName] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	files[certName] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return nil
}

// WriteSecret writes b to path, 0600 (a file there already is made 0600
// too).
func WriteSecret(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return errcode.Wrap(errcode.InvalidRequest, err, fmt.Sprintf("write %s", path))
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return errcode.Wrap(errcode.InvalidRequest, err, fmt.Sprintf("chmod %s", path))
	}
	return nil
}
