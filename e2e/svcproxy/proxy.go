// Package svcproxy makes Services' cluster IPs reachable inside the harness' network namespace,
// as kube-proxy's former userspace mode did: one TCP listener per cluster IP and port, each
// connection relayed to a ready endpoint of the Service (round robin, the next one when a dial
// fails). The namespace routes the service range to `lo` as local addresses, so a listener can
// bind any cluster IP. See e2e/README.md ("Service virtual IPs").
package svcproxy

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"kaas/e2e/clusterdns"
)

// Proxy relays connections to cluster IPs until its context ends.
type Proxy struct {
	services cache.Indexer
	slices   cache.Indexer
	logf     func(format string, args ...any)
	next     atomic.Uint64 // round robin over endpoints

	mu        sync.Mutex
	listeners map[string]*listener // "ip:port" → its listener
	stopped   bool
}

// listener serves one cluster IP and port of one Service.
type listener struct {
	l         net.Listener
	namespace string
	service   string
	port      string // the Service port's name, which its EndpointSlice ports carry
}

// Start watches client's Services and EndpointSlices and serves every TCP port of every cluster
// IP until ctx ends; logf reports listeners and relays that fail.
func Start(ctx context.Context, client kubernetes.Interface, logf func(format string, args ...any)) (*Proxy, error) {
	if logf == nil {
		logf = log.Printf
	}
	f := informers.NewSharedInformerFactory(client, 0)
	svc := f.Core().V1().Services().Informer()
	eps := f.Discovery().V1().EndpointSlices().Informer()
	_ = eps.AddIndexers(cache.Indexers{clusterdns.BySlicesService: clusterdns.SlicesByService})
	p := &Proxy{services: svc.GetIndexer(), slices: eps.GetIndexer(), logf: logf, listeners: map[string]*listener{}}
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	_, _ = svc.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	f.Start(ctx.Done())
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), svc.HasSynced, eps.HasSynced) {
		return nil, errors.New("service proxy: caches not synced")
	}
	p.sync()
	go func() {
		for {
			select {
			case <-ctx.Done():
				p.stop()
				return
			case <-changed:
				p.sync()
			}
		}
	}()
	return p, nil
}

// sync opens a listener for every cluster IP and TCP port that has none and closes those whose
// Service or port is gone.
func (p *Proxy) sync() {
	want := map[string]listener{}
	for _, obj := range p.services.List() {
		svc := obj.(*corev1.Service)
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		for _, ip := range svc.Spec.ClusterIPs {
			if net.ParseIP(ip) == nil {
				continue // "None": headless
			}
			for _, port := range svc.Spec.Ports {
				if port.Protocol != "" && port.Protocol != corev1.ProtocolTCP {
					continue
				}
				want[net.JoinHostPort(ip, strconv.Itoa(int(port.Port)))] = listener{
					namespace: svc.Namespace, service: svc.Name, port: port.Name}
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	for addr, l := range p.listeners {
		if w, ok := want[addr]; !ok || w.namespace != l.namespace || w.service != l.service || w.port != l.port {
			l.l.Close()
			delete(p.listeners, addr)
		}
	}
	for addr, w := range want {
		if _, ok := p.listeners[addr]; ok {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			p.logf("service proxy: %s/%s on %s: %v", w.namespace, w.service, addr, err)
			continue
		}
		w.l = l
		p.listeners[addr] = &w
		go p.serve(&w)
	}
}

func (p *Proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for addr, l := range p.listeners {
		l.l.Close()
		delete(p.listeners, addr)
	}
}

func (p *Proxy) serve(l *listener) {
	for {
		conn, err := l.l.Accept()
		if err != nil {
			return // closed
		}
		go p.relay(l, conn)
	}
}

// backends are the addresses of the Service's ready endpoints for the port, starting at the
// next one in round-robin order.
func (p *Proxy) backends(l *listener) []string {
	objs, _ := p.slices.ByIndex(clusterdns.BySlicesService, l.namespace+"/"+l.service)
	var out []string
	for _, obj := range objs {
		s := obj.(*discoveryv1.EndpointSlice)
		var port int32
		for _, sp := range s.Ports {
			if sp.Port != nil && (sp.Name == nil && l.port == "" || sp.Name != nil && *sp.Name == l.port) {
				port = *sp.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if (ep.Conditions.Ready == nil || *ep.Conditions.Ready) && len(ep.Addresses) > 0 {
				out = append(out, net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port))))
			}
		}
	}
	if len(out) > 1 {
		k := int(p.next.Add(1) % uint64(len(out)))
		out = append(out[k:], out[:k]...)
	}
	return out
}

// relay connects conn to the first backend that accepts and copies both ways, passing on each
// side's end of stream; with no backend the connection is closed.
func (p *Proxy) relay(l *listener, conn net.Conn) {
	defer conn.Close()
	var up net.Conn
	for _, addr := range p.backends(l) {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err == nil {
			up = c
			break
		}
	}
	if up == nil {
		p.logf("service proxy: %s/%s: no ready endpoint accepted a connection", l.namespace, l.service)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		if _, err := io.Copy(dst, src); err != nil {
			// A reset or a failed write: end both connections, as a dead peer would.
			conn.Close()
			up.Close()
		} else if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, conn)
	go pipe(conn, up)
	<-done
	<-done
}
