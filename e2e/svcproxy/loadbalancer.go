package svcproxy

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// The load balancer, as MetalLB's controller in layer-2 mode on a real cluster: every
// LoadBalancer Service without a loadBalancerClass gets one address of the pool (the one
// spec.loadBalancerIP asks for when it is free, else the lowest free one) in
// status.loadBalancer.ingress, and keeps it until it is deleted or changes type (the apiserver
// clears the status then). The proxy listens on that address for each port (wanted). Addresses
// are read back from the Services' status at start, so a restarted proxy keeps them.

// holding is the address a LoadBalancer Service holds; uid tells a Service recreated under the
// same name from the one that held it.
type holding struct {
	uid  types.UID
	addr netip.Addr
}

// eventSource names the proxy in the Events it writes on Services.
const eventSource = "kaas-e2e-service-proxy"

// ours reports whether the load balancer serves svc: a LoadBalancer Service without a
// loadBalancerClass, which would name another implementation.
func ours(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil
}

// ingressAddresses are the load-balancer addresses of svc that lie in the pool: those the proxy
// can listen on (the pool is local in the namespace).
func ingressAddresses(svc *corev1.Service, pool netip.Prefix) []string {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || !pool.IsValid() {
		return nil
	}
	var out []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil && pool.Contains(a) {
			out = append(out, a.String())
		}
	}
	return out
}

// balance releases the addresses of Services that are gone or no longer ours, gives each of our
// Services without an address one and writes it to its status. It runs before wanted, on the
// sync goroutine.
func (p *Proxy) balance() {
	if !p.pool.IsValid() {
		return
	}
	svcs := p.loadBalancers()
	p.release(svcs)
	taken := map[netip.Addr]string{} // address → "namespace/name"
	for k, h := range p.held {
		taken[h.addr] = k
	}
	// Addresses the status already names (a restarted proxy's, or another Service's that this
	// proxy has not seen assigned), before any new one is picked: a Service asking for an
	// address is refused one that is in use.
	for _, svc := range svcs {
		k := serviceKey(svc)
		if _, ok := p.held[k]; ok {
			continue
		}
		for _, s := range ingressAddresses(svc, p.pool) {
			if a := netip.MustParseAddr(s); taken[a] == "" {
				p.held[k], taken[a] = holding{svc.UID, a}, k
				break
			}
		}
	}
	for _, svc := range svcs {
		p.assign(svc, taken)
	}
}

// loadBalancers are our Services, oldest first: when two claim one address, the older keeps it.
func (p *Proxy) loadBalancers() []*corev1.Service {
	var svcs []*corev1.Service
	for _, obj := range p.services.List() {
		if svc := obj.(*corev1.Service); ours(svc) {
			svcs = append(svcs, svc)
		}
	}
	sort.Slice(svcs, func(i, j int) bool {
		ti, tj := svcs[i].CreationTimestamp, svcs[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return serviceKey(svcs[i]) < serviceKey(svcs[j])
	})
	return svcs
}

// release frees the addresses of Services that are not among svcs any more: deleted (or
// recreated under the same name), or of another type or class now.
func (p *Proxy) release(svcs []*corev1.Service) {
	live := map[string]types.UID{}
	for _, svc := range svcs {
		live[serviceKey(svc)] = svc.UID
	}
	for k, h := range p.held {
		if uid, ok := live[k]; !ok || uid != h.uid {
			p.logf("load balancer: %s released %s", k, h.addr)
			delete(p.held, k)
		}
	}
	for k := range p.warned {
		if _, ok := live[k]; !ok {
			delete(p.warned, k)
		}
	}
}

// assign gives svc an address when it has none, or the one spec.loadBalancerIP asks for when
// that differs and is free, and makes its status say so.
func (p *Proxy) assign(svc *corev1.Service, taken map[netip.Addr]string) {
	k := serviceKey(svc)
	h, has := p.held[k]
	if !has || svc.Spec.LoadBalancerIP != "" && svc.Spec.LoadBalancerIP != h.addr.String() {
		a, err := p.pick(svc, taken)
		if err != nil {
			if p.warned[k] != err.Error() {
				p.warned[k] = err.Error()
				p.logf("load balancer: %s: no address: %v", k, err)
				p.event(svc, corev1.EventTypeWarning, "AllocationFailed", "Failed to allocate IP for %q: %v", k, err)
			}
			if !has {
				return
			}
		} else {
			if has {
				p.logf("load balancer: %s released %s for %s (spec.loadBalancerIP)", k, h.addr, a)
				delete(taken, h.addr)
			}
			h, has = holding{svc.UID, a}, true
			p.held[k], taken[a] = h, k
			delete(p.warned, k)
			p.logf("load balancer: %s gets %s", k, a)
			p.event(svc, corev1.EventTypeNormal, "IPAllocated", "Assigned IP [%q]", a.String())
		}
	}
	if hasIngress(svc, h.addr) {
		return
	}
	if err := p.writeIngress(svc, h.addr); err != nil {
		p.logf("load balancer: %s: writing status.loadBalancer.ingress %s: %v (again in 1 s)", k, h.addr, err)
		time.AfterFunc(time.Second, p.poke)
	}
}

// pick is the address svc asks for (spec.loadBalancerIP) if it is in the pool and free, else
// (when it asks for none) the lowest free address of the pool.
func (p *Proxy) pick(svc *corev1.Service, taken map[netip.Addr]string) (netip.Addr, error) {
	if s := svc.Spec.LoadBalancerIP; s != "" {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil || !p.usable(a):
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %s is not an address of the pool %s", s, p.pool)
		case taken[a] != "":
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %s is in use by %s", s, taken[a])
		}
		return a, nil
	}
	for a := p.pool.Addr().Next(); p.usable(a); a = a.Next() {
		if taken[a] == "" {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no address left in the pool %s", p.pool)
}

// usable reports whether a is an address of the pool other than its network and broadcast
// addresses.
func (p *Proxy) usable(a netip.Addr) bool {
	return p.pool.Contains(a) && a != p.pool.Addr() && p.pool.Contains(a.Next())
}

// hasIngress reports whether svc's status names exactly addr.
func hasIngress(svc *corev1.Service, addr netip.Addr) bool {
	ing := svc.Status.LoadBalancer.Ingress
	return len(ing) == 1 && ing[0].IP == addr.String()
}

// writeIngress sets svc's status.loadBalancer.ingress to addr through the status subresource,
// on a fresh copy (the cache may not have this proxy's own last write yet), again on a
// conflict. A Service deleted or changed meanwhile is left to the next sync.
func (p *Proxy) writeIngress(svc *corev1.Service, addr netip.Addr) error {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	services := p.client.CoreV1().Services(svc.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := services.Get(ctx, svc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.UID != svc.UID || !ours(cur) || hasIngress(cur, addr) {
			return nil
		}
		vip := corev1.LoadBalancerIPModeVIP // the proxy serves the address itself, as kube-proxy does
		cur.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr.String(), IPMode: &vip}}
		_, err = services.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// event records an Event on svc, as MetalLB's controller does (`kubectl describe service`
// shows it); a failure is only logged.
func (p *Proxy) event(svc *corev1.Service, kind, reason, format string, args ...any) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: svc.Name + ".", Namespace: svc.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace,
			Name: svc.Name, UID: svc.UID, ResourceVersion: svc.ResourceVersion},
		Reason: reason, Message: fmt.Sprintf(format, args...), Type: kind,
		Source:         corev1.EventSource{Component: eventSource},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := p.client.CoreV1().Events(svc.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		p.logf("load balancer: event %s on %s/%s: %v", reason, svc.Namespace, svc.Name, err)
	}
}

// serviceKey is a Service's key, "namespace/name".
func serviceKey(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }
