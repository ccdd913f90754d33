package kubelet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"

	"kaas/e2e/netns"
)

// How long an idle forward stays open and how long a client may take to open a stream: the
// real kubelet's defaults (--streaming-connection-idle-timeout, its stream creation timeout).
const (
	portForwardIdleTimeout    = 4 * time.Hour
	portForwardStreamCreation = 30 * time.Second
)

// portForward serves `kubectl port-forward` (the apiserver proxies
// /api/v1/namespaces/<ns>/pods/<pod>/portforward here): SPDY or WebSocket streams, each copied
// to a TCP connection to the pod, with the protocol code of Kubernetes' own kubelet.
// It dials localhost in the pod's network namespace, as a real kubelet does (a server bound to
// the pod IP only is not reached); a kubelet outside the harness' namespace dials the pod IP.
func (k *Kubelet) portForward(rw http.ResponseWriter, r *http.Request) {
	ns, name, uid := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid")
	w := k.podWorker(ns, name)
	if w == nil || (uid != "" && string(w.uid) != uid) {
		http.Error(rw, "pod does not exist", http.StatusNotFound)
		return
	}
	options, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(rw, r, podDialer{w}, name, string(w.uid), options,
		portForwardIdleTimeout, portForwardStreamCreation, portforward.SupportedProtocols)
}

// podDialer copies a forwarded stream to and from a port of one pod.
type podDialer struct{ w *podWorker }

func (d podDialer) PortForward(ctx context.Context, name string, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	d.w.mu.Lock()
	ip := d.w.ip
	d.w.mu.Unlock()
	if ip == "" {
		return fmt.Errorf("pod %s has no IP yet", name)
	}
	var conn net.Conn
	var err error
	if ns := d.w.netns(ip); ns != "" {
		// As a real kubelet: localhost in the pod's network namespace.
		conn, err = netns.Dial(ctx, ns, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	} else {
		var dialer net.Dialer
		conn, err = dialer.DialContext(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))))
	}
	if err != nil {
		return fmt.Errorf("forwarding port %d of pod %s: %w", port, name, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// podWorker is the worker of the pod ns/name on this node that has not stopped for good (a
// StatefulSet pod deleted and made again has two for a while), or nil.
func (k *Kubelet) podWorker(ns, name string) *podWorker {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.workers {
		if w.pod.Namespace != ns || w.pod.Name != name {
			continue
		}
		w.mu.Lock()
		done := w.done
		w.mu.Unlock()
		if !done {
			return w
		}
	}
	return nil
}
