package kubelet

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// serve starts the kubelet's HTTPS endpoint on the node address, which the apiserver proxies
// `kubectl logs` to (/containerLogs/<ns>/<pod>/<container>) and `kubectl port-forward` to
// (/portForward/<ns>/<pod>). It returns the port to advertise.
// NB: it neither authenticates nor authorizes callers (a real kubelet asks the apiserver); it is
// only reachable inside the harness' network namespace.
func (k *Kubelet) serve(ctx context.Context) (int, error) {
	cert, err := selfSigned(k.cfg.NodeIP)
	if err != nil {
		return 0, err
	}
	l, err := tls.Listen("tcp", net.JoinHostPort(k.cfg.NodeIP, "0"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return 0, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", k.containerLogs)
	mux.HandleFunc("/portForward/{ns}/{pod}", k.portForward)
	mux.HandleFunc("/portForward/{ns}/{pod}/{uid}", k.portForward)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// containerLogs serves one container's output: the current run, or with previous=true the run
// before it; follow streams until the container exits; tailLines keeps the last lines.
func (k *Kubelet) containerLogs(rw http.ResponseWriter, r *http.Request) {
	ns, podName, name := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	var c *container
	k.mu.Lock()
	for _, w := range k.workers {
		if w.pod.Namespace == ns && w.pod.Name == podName {
			for _, cc := range append(append([]*container{}, w.inits...), w.containers...) {
				if cc.spec.Name == name {
					c = cc
				}
			}
		}
	}
	k.mu.Unlock()
	if c == nil {
		http.Error(rw, fmt.Sprintf("container %s of pod %s/%s is not on this node", name, ns, podName), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	previous := q.Get("previous") == "true"
	// bounds is the run's part of the log file: [from, to), to -1 while it still runs.
	bounds := func() (from, to int64) {
		c.w.mu.Lock()
		defer c.w.mu.Unlock()
		if previous {
			return c.prevLogStart, c.prevLogEnd
		}
		return c.logStart, c.logEnd
	}
	f, err := os.Open(filepath.Join(c.w.logDir, name+".log"))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	from, to := bounds()
	sent := readLog(f, from, to)
	data := sent
	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil {
		data = lastLines(data, n)
	}
	rw.Header().Set("Content-Type", "text/plain")
	_, _ = rw.Write(data)
	if q.Get("follow") != "true" || to >= 0 {
		return
	}
	flusher, _ := rw.(http.Flusher)
	pos := from + int64(len(sent))
	for {
		_, to = bounds()
		chunk := readLog(f, pos, to)
		pos += int64(len(chunk))
		if len(chunk) > 0 {
			if _, err := rw.Write(chunk); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if to >= 0 && pos >= to {
			return // the run ended and all of it was sent
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readLog reads f from from up to to, or to its end when to is -1.
func readLog(f *os.File, from, to int64) []byte {
	if to < 0 {
		data, _ := io.ReadAll(io.NewSectionReader(f, from, 1<<62))
		return data
	}
	data := make([]byte, max(to-from, 0))
	n, _ := f.ReadAt(data, from)
	return data[:n]
}

func lastLines(data []byte, n int) []byte {
	if n < 0 {
		return data
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, nil)
}

func selfSigned(ip string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "process-kubelet"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 24 * time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP(ip)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
