package svcproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The ingress controller routes a TLS connection by the server name of its ClientHello without
// terminating it (ingress.go), so it reads the ClientHello itself: crypto/tls has no way to look
// at a ClientHello and hand the connection on untouched. readClientHello reads exactly the
// records that carry the ClientHello and returns them, to be sent to the backend first.

const (
	recordHandshake    = 22
	handshakeHello     = 1            // client_hello
	extServerName      = 0            // RFC 6066 server_name
	serverNameHostName = 0            // its only name type, host_name
	maxRecord          = 1<<14 + 2048 // a TLSCiphertext's bound; a plaintext record is at most 2^14
	maxHello           = 1 << 16      // far above any real ClientHello, to bound what one client makes us buffer
)

// errNotTLS is a connection that does not start with a TLS handshake record.
var errNotTLS = errors.New("not a TLS handshake")

// readClientHello reads TLS records from r until they hold a whole first handshake message,
// which must be a ClientHello (it may span records), and returns the host name its server_name
// extension names ("" for none) and every byte it read.
func readClientHello(r io.Reader) (serverName string, read []byte, err error) {
	var msg []byte // the handshake message so far, from its 4-byte header
	for len(msg) < 4 || len(msg) < 4+handshakeLen(msg) {
		var header [5]byte
		if _, err := io.ReadFull(r, header[:]); err != nil {
			return "", read, err
		}
		read = append(read, header[:]...)
		n := int(binary.BigEndian.Uint16(header[3:]))
		if header[0] != recordHandshake || header[1] != 3 || n == 0 || n > maxRecord {
			return "", read, fmt.Errorf("%w: record header % x", errNotTLS, header)
		}
		start := len(read)
		read = append(read, make([]byte, n)...)
		got, err := io.ReadFull(r, read[start:])
		if read = read[:start+got]; err != nil {
			return "", read, err
		}
		msg = append(msg, read[start:]...)
		if len(msg) >= 4 && (msg[0] != handshakeHello || handshakeLen(msg) > maxHello) {
			return "", read, fmt.Errorf("%w: handshake type %d of %d bytes, not a ClientHello", errNotTLS, msg[0], handshakeLen(msg))
		}
	}
	serverName, err = helloServerName(msg[4 : 4+handshakeLen(msg)])
	return serverName, read, err
}

// handshakeLen is the body length in a handshake message's header (type, uint24 length).
func handshakeLen(msg []byte) int {
	return int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
}

// helloServerName walks a ClientHello's body (RFC 8446 4.1.2; TLS 1.0–1.2's has the same
// layout) to its server_name extension and returns the host name there, "" when there is none.
func helloServerName(body []byte) (string, error) {
	malformed := errors.New("malformed ClientHello")
	// legacy_version, random, then legacy_session_id<0..32>, cipher_suites<2..2^16-2> and
	// legacy_compression_methods<1..2^8-1>.
	_, rest, ok := take(body, 2+32)
	for _, lenBytes := range []int{1, 2, 1} {
		if ok {
			_, rest, ok = vector(rest, lenBytes)
		}
	}
	if !ok {
		return "", malformed
	}
	if len(rest) == 0 {
		return "", nil // no extensions (TLS 1.0–1.2 without any): no server name
	}
	exts, rest, ok := vector(rest, 2)
	if !ok || len(rest) != 0 {
		return "", malformed
	}
	for len(exts) > 0 {
		var typ, data []byte
		if typ, exts, ok = take(exts, 2); ok {
			data, exts, ok = vector(exts, 2)
		}
		if !ok {
			return "", malformed
		}
		if binary.BigEndian.Uint16(typ) == extServerName {
			return hostName(data)
		}
	}
	return "", nil
}

// hostName is the host_name entry of a server_name extension's ServerNameList.
func hostName(ext []byte) (string, error) {
	list, rest, ok := vector(ext, 2)
	if !ok || len(rest) != 0 || len(list) == 0 {
		return "", errors.New("malformed server_name extension")
	}
	for len(list) > 0 {
		var typ, name []byte
		if typ, list, ok = take(list, 1); ok {
			name, list, ok = vector(list, 2)
		}
		if !ok {
			return "", errors.New("malformed server_name extension")
		}
		if typ[0] == serverNameHostName {
			return string(name), nil
		}
	}
	return "", nil
}

// take splits the first n bytes off b; ok is false when b is shorter.
func take(b []byte, n int) (head, rest []byte, ok bool) {
	if len(b) < n {
		return nil, b, false
	}
	return b[:n], b[n:], true
}

// vector splits a TLS vector off b: a big-endian length of lenBytes bytes, then that many
// bytes; ok is false when b is shorter than either.
func vector(b []byte, lenBytes int) (v, rest []byte, ok bool) {
	l, rest, ok := take(b, lenBytes)
	if !ok {
		return nil, b, false
	}
	n := 0
	for _, c := range l {
		n = n<<8 | int(c)
	}
	return take(rest, n)
}
