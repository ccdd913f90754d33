package svcproxy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"
)

// captureHello is the ClientHello crypto/tls sends for cfg: the bytes a client writes before it
// waits for the server's answer.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer client.Close()
	go func() { _ = tls.Client(client, cfg).Handshake() }()
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	name, read, err := readClientHello(server)
	if err != nil {
		t.Fatalf("readClientHello: %v (name %q)", err, name)
	}
	server.Close()
	return read
}

func TestReadClientHelloFromCryptoTLS(t *testing.T) {
	for _, tc := range []struct {
		what string
		cfg  *tls.Config
		want string
	}{
		{"TLS 1.3", &tls.Config{ServerName: "broker-0.kafka.example"}, "broker-0.kafka.example"},
		{"TLS 1.2 only", &tls.Config{ServerName: "b.example", MaxVersion: tls.VersionTLS12}, "b.example"},
		// crypto/tls sends no server_name without a name, nor for an IP address (RFC 6066).
		{"no name", &tls.Config{InsecureSkipVerify: true}, ""},
		{"an IP address", &tls.Config{ServerName: "172.30.1.1"}, ""},
	} {
		hello := captureHello(t, tc.cfg)
		name, read, err := readClientHello(bytes.NewReader(append(hello, "after"...)))
		if err != nil || name != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.what, name, err, tc.want)
		}
		if !bytes.Equal(read, hello) {
			t.Errorf("%s: read %d bytes, want the %d of the ClientHello's records", tc.what, len(read), len(hello))
		}
	}
}

// The bytes read, sent first, and then the rest of the connection make the whole handshake: a
// TLS server behind them sees the client's server name and the client sees the server's
// certificate, as through the ingress controller.
func TestReadClientHelloReplays(t *testing.T) {
	cert := selfSigned(t, "backend.example")
	client, server := net.Pipe()
	done := make(chan error, 1)
	go func() {
		conn := tls.Client(client, &tls.Config{ServerName: "backend.example", InsecureSkipVerify: true})
		err := conn.Handshake()
		if err == nil && conn.ConnectionState().PeerCertificates[0].Subject.CommonName != "backend.example" {
			err = errors.New("another certificate")
		}
		done <- err
		conn.Close()
	}()
	_ = server.SetDeadline(time.Now().Add(5 * time.Second))
	name, hello, err := readClientHello(server)
	if err != nil || name != "backend.example" {
		t.Fatalf("readClientHello: %q, %v", name, err)
	}
	var asked string
	srv := tls.Server(&replayConn{Conn: server, first: hello}, &tls.Config{
		Certificates: []tls.Certificate{cert},
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			asked = h.ServerName
			return nil, nil
		},
	})
	if err := srv.Handshake(); err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if asked != "backend.example" {
		t.Errorf("the server saw server name %q", asked)
	}
}

// A ClientHello may span records (RFC 8446 5.1); the name is found across them.
func TestReadClientHelloFragmented(t *testing.T) {
	hello := captureHello(t, &tls.Config{ServerName: "broker-1.kafka.example"})
	msg := hello[5:] // one record in what crypto/tls sends
	var split []byte
	for len(msg) > 0 {
		n := min(len(msg), 37)
		split = append(split, recordHandshake, 3, 1, byte(n>>8), byte(n))
		split, msg = append(split, msg[:n]...), msg[n:]
	}
	name, read, err := readClientHello(bytes.NewReader(split))
	if err != nil || name != "broker-1.kafka.example" || !bytes.Equal(read, split) {
		t.Errorf("fragmented: %q, %v, %d of %d bytes read", name, err, len(read), len(split))
	}
}

// Every cut of a ClientHello is an error, never a name or a panic; so is a length that points
// past the end of what encloses it.
func TestReadClientHelloTruncated(t *testing.T) {
	hello := captureHello(t, &tls.Config{ServerName: "broker-0.kafka.example"})
	for n := 0; n < len(hello); n++ {
		if name, _, err := readClientHello(bytes.NewReader(hello[:n])); err == nil {
			t.Fatalf("cut at %d of %d bytes: %q, no error", n, len(hello), name)
		}
	}
	// The handshake message and its record shortened together: the ClientHello's own vectors
	// run past its end.
	body := hello[9:]
	for n := 0; n < len(body); n++ {
		if name, err := helloServerName(body[:n]); err == nil && name != "" {
			t.Fatalf("body cut at %d of %d bytes: %q", n, len(body), name)
		}
	}
	ext := []byte{0, 7, 0, 0, 4, 'a', 'b'} // a host name of 4 bytes with 2 there
	if _, err := hostName(ext); err == nil {
		t.Error("a short host name: no error")
	}
}

func TestReadClientHelloNotTLS(t *testing.T) {
	for what, in := range map[string][]byte{
		"HTTP":         []byte("GET / HTTP/1.1\r\nHost: broker-0.kafka.example\r\n\r\n"),
		"alert record": {21, 3, 3, 0, 2, 2, 40},
		"server hello": {recordHandshake, 3, 3, 0, 4, 2, 0, 0, 0},
		"huge record":  {recordHandshake, 3, 3, 0xff, 0xff},
		"huge hello":   {recordHandshake, 3, 3, 0, 4, handshakeHello, 0xff, 0xff, 0xff},
	} {
		if name, _, err := readClientHello(bytes.NewReader(in)); !errors.Is(err, errNotTLS) {
			t.Errorf("%s: %q, %v; want %v", what, name, err, errNotTLS)
		}
	}
}

// A ClientHello without extensions (TLS 1.0–1.2 allow it) names no server.
func TestReadClientHelloNoExtensions(t *testing.T) {
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // no session id
	body = append(body, 0, 2, 0x00, 0x2f)    // one cipher suite
	body = append(body, 1, 0)                // null compression
	msg := append([]byte{handshakeHello, 0, 0, byte(len(body))}, body...)
	rec := append([]byte{recordHandshake, 3, 1, 0, byte(len(msg))}, msg...)
	if name, _, err := readClientHello(bytes.NewReader(rec)); name != "" || err != nil {
		t.Errorf("%q, %v; want no name", name, err)
	}
	// With an extension list that is not server_name.
	body = append(body, 0, 4, 0, 23, 0, 0) // extended_master_secret
	msg = append([]byte{handshakeHello, 0, 0, byte(len(body))}, body...)
	rec = append([]byte{recordHandshake, 3, 1, 0, byte(len(msg))}, msg...)
	if name, _, err := readClientHello(bytes.NewReader(rec)); name != "" || err != nil {
		t.Errorf("other extensions: %q, %v; want no name", name, err)
	}
}

func FuzzReadClientHello(f *testing.F) {
	f.Add(captureHello(f, &tls.Config{ServerName: "broker-0.kafka.example"}))
	f.Add(captureHello(f, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, read, _ := readClientHello(bytes.NewReader(in))
		if !bytes.HasPrefix(in, read) {
			t.Fatalf("read %x, not a prefix of the input", read)
		}
	})
}

// replayConn reads first, then from Conn: a connection whose first bytes were read already.
type replayConn struct {
	net.Conn
	first []byte
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(b, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// selfSigned is a certificate for name, signed by itself.
func selfSigned(t testing.TB, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
