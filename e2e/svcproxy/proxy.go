// Package svcproxy makes Services reachable inside the harness' network namespace, as
// kube-proxy's former userspace mode did: one TCP listener per cluster IP and port, per node
// address and node port (NodePort and LoadBalancer Services) and per load-balancer ingress
// address and port, each connection relayed to a ready endpoint of the Service (round robin, the
// next one when a dial fails). The namespace routes the service range and the load-balancer
// pool to `lo` as local addresses, so a listener can bind any of them; node addresses are on
// `lo` already. It is also the cluster's load-balancer controller (loadbalancer.go): it gives
// LoadBalancer Services an address of the pool; and an ingress controller for TLS passthrough
// (ingress.go). See e2e/README.md ("Service virtual IPs").
package svcproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"slices"
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

// Options configure a Proxy.
type Options struct {
	// LoadBalancerPool is where LoadBalancer Services get their address from; the zero prefix
	// disables the load balancer (such Services are then served on their node ports only).
	LoadBalancerPool netip.Prefix
	// Ingress configures the ingress controller (ingress.go); without classes there is none.
	Ingress IngressOptions
	// Logf reports listeners, relays that fail and load-balancer addresses (default log.Printf).
	Logf func(format string, args ...any)
}

// Proxy relays connections to Services until its context ends.
type Proxy struct {
	ctx      context.Context
	client   kubernetes.Interface
	services cache.Indexer
	slices   cache.Indexer
	nodes    cache.Store
	pool     netip.Prefix
	logf     func(format string, args ...any)
	next     atomic.Uint64 // round robin over endpoints
	poke     func()        // asks for a sync

	// Owned by the sync goroutine: the load balancer's addresses (loadbalancer.go).
	held   map[string]holding // "namespace/name" → its address
	warned map[string]string  // "namespace/name" → the last reason it got no address, logged once

	// The ingress controller's (ingress.go); ingresses is nil without one.
	ingress   IngressOptions
	ingresses cache.Indexer
	described map[string]string // "namespace/name" → what the log last said of the Ingress

	mu        sync.Mutex
	listeners map[string]*listener // "ip:port" → its listener
	ingressL  net.Listener         // the ingress controller's, nil without one
	stopped   bool
}

// listener serves one address (cluster IP, node address or load-balancer ingress) and port of
// one Service.
type listener struct {
	l net.Listener
	target
}

// target is a port of a Service that connections are relayed to.
type target struct {
	namespace string
	service   string
	port      string // the Service port's name, which its EndpointSlice ports carry
}

// Start watches client's Services, EndpointSlices and Nodes (and Ingresses, with an ingress
// controller) and serves every TCP port of every cluster IP, node port and load-balancer address
// (and the ingress controller's address) until ctx ends.
func Start(ctx context.Context, client kubernetes.Interface, opts Options) (*Proxy, error) {
	if opts.Logf == nil {
		opts.Logf = log.Printf
	}
	f := informers.NewSharedInformerFactory(client, 0)
	svc := f.Core().V1().Services().Informer()
	eps := f.Discovery().V1().EndpointSlices().Informer()
	nodes := f.Core().V1().Nodes().Informer()
	_ = eps.AddIndexers(cache.Indexers{clusterdns.BySlicesService: clusterdns.SlicesByService})
	p := &Proxy{ctx: ctx, client: client, services: svc.GetIndexer(), slices: eps.GetIndexer(),
		nodes: nodes.GetStore(), pool: opts.LoadBalancerPool.Masked(), logf: opts.Logf, ingress: opts.Ingress,
		held: map[string]holding{}, warned: map[string]string{}, described: map[string]string{},
		listeners: map[string]*listener{}}
	changed := make(chan struct{}, 1)
	p.poke = func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	pokes := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.poke() },
		UpdateFunc: func(any, any) { p.poke() },
		DeleteFunc: func(any) { p.poke() },
	}
	_, _ = svc.AddEventHandler(pokes)
	synced := []cache.InformerSynced{svc.HasSynced, eps.HasSynced, nodes.HasSynced}
	if len(opts.Ingress.Classes) > 0 {
		ing := f.Networking().V1().Ingresses().Informer()
		_, _ = ing.AddEventHandler(pokes)
		p.ingresses, synced = ing.GetIndexer(), append(synced, ing.HasSynced)
	}
	// Nodes: only a change of addresses matters (their status is rewritten every 30 s).
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { p.poke() },
		UpdateFunc: func(old, cur any) {
			if !slices.Equal(nodeAddresses(old.(*corev1.Node)), nodeAddresses(cur.(*corev1.Node))) {
				p.poke()
			}
		},
		DeleteFunc: func(any) { p.poke() },
	})
	f.Start(ctx.Done())
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		return nil, errors.New("service proxy: caches not synced")
	}
	if p.ingresses != nil {
		l, err := net.Listen("tcp", opts.Ingress.Listen)
		if err != nil {
			return nil, fmt.Errorf("ingress controller: %w", err)
		}
		p.ingressL = l
		go p.serveIngress(l)
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

// sync gives LoadBalancer Services their addresses and served Ingresses the ingress
// controller's, opens a listener for every address and TCP port that has none and closes those
// whose Service, port, node or address is gone.
func (p *Proxy) sync() {
	p.balance()
	p.publish()
	want := p.wanted()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	for addr, l := range p.listeners {
		if w, ok := want[addr]; !ok || w.target != l.target {
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

// wanted is every address and port to listen on, with the Service port it leads to: the cluster
// IPs, and for NodePort and LoadBalancer Services each node address with the node port and each
// load-balancer address of the pool with the port.
func (p *Proxy) wanted() map[string]listener {
	var nodeIPs []string
	for _, obj := range p.nodes.List() {
		nodeIPs = append(nodeIPs, nodeAddresses(obj.(*corev1.Node))...)
	}
	want := map[string]listener{}
	for _, obj := range p.services.List() {
		svc := obj.(*corev1.Service)
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		ips := ingressAddresses(svc, p.pool)
		nodePorts := svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
		for _, port := range svc.Spec.Ports {
			if port.Protocol != "" && port.Protocol != corev1.ProtocolTCP {
				continue
			}
			to := listener{target: target{namespace: svc.Namespace, service: svc.Name, port: port.Name}}
			for _, ip := range svc.Spec.ClusterIPs {
				if net.ParseIP(ip) != nil { // not "None": headless
					want[net.JoinHostPort(ip, strconv.Itoa(int(port.Port)))] = to
				}
			}
			for _, ip := range ips {
				want[net.JoinHostPort(ip, strconv.Itoa(int(port.Port)))] = to
			}
			if nodePorts && port.NodePort != 0 {
				for _, ip := range nodeIPs {
					want[net.JoinHostPort(ip, strconv.Itoa(int(port.NodePort)))] = to
				}
			}
		}
	}
	return want
}

// nodeAddresses are a Node's InternalIPs: what its pods see as status.hostIP, and where the
// node serves node ports (kube-proxy serves them on every address of its node; here every node's
// address is on the one namespace's `lo`, and one proxy serves them all).
func nodeAddresses(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address) != nil {
			out = append(out, a.Address)
		}
	}
	return out
}

func (p *Proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.ingressL != nil {
		p.ingressL.Close()
	}
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
		go p.relay(l.target, conn, nil)
	}
}

// backends are the addresses of the Service's ready endpoints for the port, starting at the
// next one in round-robin order.
func (p *Proxy) backends(to target) []string {
	objs, _ := p.slices.ByIndex(clusterdns.BySlicesService, to.namespace+"/"+to.service)
	var out []string
	for _, obj := range objs {
		s := obj.(*discoveryv1.EndpointSlice)
		var port int32
		for _, sp := range s.Ports {
			if sp.Port != nil && (sp.Name == nil && to.port == "" || sp.Name != nil && *sp.Name == to.port) {
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

// relay connects conn to the first backend of to that accepts, sends it first (what was read
// from conn already: the ingress controller's ClientHello) and copies both ways, passing on each
// side's end of stream; with no backend the connection is closed.
func (p *Proxy) relay(to target, conn net.Conn, first []byte) {
	defer conn.Close()
	var up net.Conn
	for _, addr := range p.backends(to) {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err == nil {
			up = c
			break
		}
	}
	if up == nil {
		p.logf("service proxy: %s/%s: no ready endpoint accepted a connection", to.namespace, to.service)
		return
	}
	defer up.Close()
	if _, err := up.Write(first); err != nil {
		return
	}
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
