package etcdconn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llbproject/llb/internal/etcdtest"
)

// writeCert writes a self-signed CA and a server certificate for ip.
func writeCert(t *testing.T, dir string, ip net.IP) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "llb test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "etcd"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{ip},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// TestNew_TLSEndpointVerifiedWithTheCA: a client configured with the CA
// file talks to an https etcd; without it the certificate is refused.
func TestNew_TLSEndpointVerifiedWithTheCA(t *testing.T) {
	if !etcdtest.Available() {
		t.Skip("etcd binary not on PATH: install Debian's etcd-server (make deps does) to run this test")
	}
	dir := t.TempDir()
	host := fmt.Sprintf("127.77.%d.1", os.Getpid()%250+1)
	ca, cert, key := writeCert(t, dir, net.ParseIP(host))
	e := etcdtest.Start(t, etcdtest.Options{Host: host, CertFile: cert, KeyFile: key})
	u, _ := url.Parse(e.Endpoints()[0])
	if u.Scheme != "https" {
		t.Fatalf("endpoint %s; want https", u)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	good := Config{Endpoints: e.Endpoints(), CAFile: ca}
	cli, err := good.New()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/llb/tls-test", "ok"); err != nil {
		t.Fatalf("put over TLS with the CA: %v", err)
	}

	bad := Config{Endpoints: e.Endpoints(), RequestTimeout: time.Second}
	cli2, err := bad.New()
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	bctx, bcancel := context.WithTimeout(context.Background(), time.Second)
	defer bcancel()
	if _, err := cli2.Get(bctx, "/llb/tls-test"); err == nil {
		t.Fatal("get over TLS without the CA: got nil; want a certificate error or timeout")
	}
}
