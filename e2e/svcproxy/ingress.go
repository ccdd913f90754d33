package svcproxy

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// The ingress controller, as ingress-nginx started with --enable-ssl-passthrough and
// --publish-service: it serves the Ingresses of its classes that ask for TLS passthrough
// (PassthroughAnnotation "true") on one address, the controller's own (IngressOptions.Listen,
// behind its LoadBalancer Service). Of each connection it reads the ClientHello's server name
// (clienthello.go), takes the rule whose host is that name, and relays the connection untouched,
// ClientHello first, to the rule's backend Service port as a cluster IP would (relay): TLS is not
// terminated, the client shakes hands with the backend. A name no rule has, or no name, closes
// the connection (ingress-nginx would hand it to its own HTTPS server, which serves the HTTP
// Ingresses, which this one does not serve). Served Ingresses show the address of the
// controller's Service in status.loadBalancer.ingress, as --publish-service makes ingress-nginx
// write it.

// IngressOptions configure the ingress controller.
type IngressOptions struct {
	// Classes are the IngressClass names whose Ingresses are served (spec.ingressClassName, or
	// the older kubernetes.io/ingress.class annotation); none disables the controller.
	Classes []string
	// Listen is the controller's own address, "ip:port" (443): where its Service leads.
	Listen string
	// PublishService is "namespace/name" of the controller's LoadBalancer Service, whose address
	// the served Ingresses get in their status; "" publishes Listen's address.
	PublishService string
}

const (
	// PassthroughAnnotation set to "true" asks for TLS passthrough, as of ingress-nginx.
	PassthroughAnnotation = "nginx.ingress.kubernetes.io/ssl-passthrough"
	// classAnnotation is the class before spec.ingressClassName (the apiserver refuses both).
	classAnnotation = "kubernetes.io/ingress.class"
	// helloTimeout bounds the wait for a ClientHello, so that a client that sends none does not
	// hold its connection for ever.
	helloTimeout = 10 * time.Second
)

// serveIngress accepts the controller's connections until its listener is closed.
func (p *Proxy) serveIngress(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return // closed
		}
		go p.passthrough(conn)
	}
}

// passthrough reads conn's ClientHello and relays conn, the ClientHello first, to the backend of
// the rule for its server name; without one the connection is closed.
func (p *Proxy) passthrough(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	name, hello, err := readClientHello(conn)
	_ = conn.SetReadDeadline(time.Time{})
	if err != nil {
		p.logf("ingress: %s: no ClientHello: %v", conn.RemoteAddr(), err)
		conn.Close()
		return
	}
	to, err := p.route(name)
	if err != nil {
		p.logf("ingress: %s: server name %q: %v: closed", conn.RemoteAddr(), name, err)
		conn.Close()
		return
	}
	p.relay(to, conn, hello)
}

// route is the backend Service port for a server name: that of the oldest served Ingress with a
// rule for it (ingress-nginx's choice when Ingresses share a host). Host names match whole,
// whatever their case; a wildcard host matches nothing (ingress-nginx's passthrough matches
// exact names only).
func (p *Proxy) route(name string) (target, error) {
	if name == "" {
		return target{}, fmt.Errorf("no server_name in the ClientHello")
	}
	for _, ing := range p.servedIngresses() {
		for _, rule := range ing.Spec.Rules {
			if !strings.EqualFold(rule.Host, name) {
				continue
			}
			if b := rootBackend(rule); b != nil {
				return p.servicePort(ing.Namespace, b)
			}
		}
	}
	return target{}, fmt.Errorf("no passthrough Ingress rule has this host")
}

// rootBackend is the Service behind a rule's path "/", the one ingress-nginx passes through
// (it ignores the other paths, which TLS passthrough cannot see); nil when it has none.
func rootBackend(rule networkingv1.IngressRule) *networkingv1.IngressServiceBackend {
	if rule.HTTP == nil {
		return nil
	}
	for _, path := range rule.HTTP.Paths {
		if path.Path == "/" && path.Backend.Service != nil {
			return path.Backend.Service
		}
	}
	return nil
}

// servicePort resolves an Ingress backend (a Service port by number or name) to the Service
// port's name, which its EndpointSlice ports carry.
func (p *Proxy) servicePort(namespace string, b *networkingv1.IngressServiceBackend) (target, error) {
	obj, ok, _ := p.services.GetByKey(namespace + "/" + b.Name)
	if !ok {
		return target{}, fmt.Errorf("backend Service %s/%s not found", namespace, b.Name)
	}
	svc := obj.(*corev1.Service)
	for _, sp := range svc.Spec.Ports {
		if (sp.Protocol == "" || sp.Protocol == corev1.ProtocolTCP) &&
			(b.Port.Name != "" && sp.Name == b.Port.Name || b.Port.Name == "" && sp.Port == b.Port.Number) {
			return target{namespace: namespace, service: b.Name, port: sp.Name}, nil
		}
	}
	return target{}, fmt.Errorf("backend Service %s/%s has no TCP port %s", namespace, b.Name, backendPort(b))
}

// backendPort is an Ingress backend's port as a user wrote it.
func backendPort(b *networkingv1.IngressServiceBackend) string {
	if b.Port.Name != "" {
		return b.Port.Name
	}
	return fmt.Sprint(b.Port.Number)
}

// servedIngresses are the Ingresses the controller serves, oldest first.
func (p *Proxy) servedIngresses() []*networkingv1.Ingress {
	var out []*networkingv1.Ingress
	for _, obj := range p.ingresses.List() {
		if ing := obj.(*networkingv1.Ingress); p.ourClass(ing) && notServed(ing) == "" {
			out = append(out, ing)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].CreationTimestamp, out[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return ingressKey(out[i]) < ingressKey(out[j])
	})
	return out
}

// ourClass reports whether ing names one of the controller's classes.
func (p *Proxy) ourClass(ing *networkingv1.Ingress) bool {
	class := ing.Annotations[classAnnotation]
	if ing.Spec.IngressClassName != nil {
		class = *ing.Spec.IngressClassName
	}
	for _, c := range p.ingress.Classes {
		if c == class {
			return true
		}
	}
	return false
}

// notServed says why an Ingress of our classes is not served: without passthrough ingress-nginx
// would terminate TLS and serve HTTP, which this controller does not do. "" when it is served.
func notServed(ing *networkingv1.Ingress) string {
	if ing.Annotations[PassthroughAnnotation] != "true" {
		return fmt.Sprintf("not served: no %s: \"true\" (ingress-nginx would serve it as HTTP; the harness serves TLS passthrough only)",
			PassthroughAnnotation)
	}
	return ""
}

// describe is what the log says of an Ingress of our classes: why it is not served, or where
// each of its hosts leads.
func (p *Proxy) describe(ing *networkingv1.Ingress) string {
	if why := notServed(ing); why != "" {
		return why
	}
	var hosts []string
	for _, rule := range ing.Spec.Rules {
		b := rootBackend(rule)
		switch {
		case rule.Host == "":
			hosts = append(hosts, "a rule without host (ignored: passthrough routes by host)")
		case b == nil:
			hosts = append(hosts, rule.Host+" has no path / (ignored: passthrough relays the whole connection to the backend of /)")
		default:
			hosts = append(hosts, fmt.Sprintf("%s → %s:%s", rule.Host, b.Name, backendPort(b)))
		}
	}
	return "serves " + strings.Join(hosts, ", ")
}

// publish writes the controller's address to the status of every served Ingress that does not
// show it yet, and logs what it serves of each Ingress of its classes when that changes. It runs
// on the sync goroutine.
func (p *Proxy) publish() {
	if p.ingresses == nil {
		return
	}
	addr := p.publishedAddress()
	seen := map[string]bool{}
	for _, obj := range p.ingresses.List() {
		ing := obj.(*networkingv1.Ingress)
		k := ingressKey(ing)
		if !p.ourClass(ing) {
			continue
		}
		seen[k] = true
		if d := p.describe(ing); p.described[k] != d {
			p.described[k] = d
			p.logf("ingress: %s: %s", k, d)
		}
		if notServed(ing) != "" || addr == "" || hasIngressIP(ing, addr) {
			continue
		}
		if err := p.writeIngressStatus(ing, addr); err != nil {
			p.logf("ingress: %s: writing status.loadBalancer.ingress %s: %v (again in 1 s)", k, addr, err)
			time.AfterFunc(time.Second, p.poke)
		}
	}
	for k := range p.described {
		if !seen[k] {
			delete(p.described, k)
		}
	}
}

// publishedAddress is the address of the controller's Service (its first load-balancer
// ingress), or its own when it publishes no Service; "" while the Service has none.
func (p *Proxy) publishedAddress() string {
	if p.ingress.PublishService == "" {
		host, _, _ := net.SplitHostPort(p.ingress.Listen)
		return host
	}
	obj, ok, _ := p.services.GetByKey(p.ingress.PublishService)
	if !ok {
		return ""
	}
	if ing := obj.(*corev1.Service).Status.LoadBalancer.Ingress; len(ing) > 0 {
		return ing[0].IP
	}
	return ""
}

// hasIngressIP reports whether ing's status names exactly addr.
func hasIngressIP(ing *networkingv1.Ingress, addr string) bool {
	lb := ing.Status.LoadBalancer.Ingress
	return len(lb) == 1 && lb[0].IP == addr && lb[0].Hostname == ""
}

// writeIngressStatus sets ing's status.loadBalancer.ingress to addr through the status
// subresource, on a fresh copy, again on a conflict (the operator that owns the Ingress may
// write it meanwhile). An Ingress deleted or no longer served is left alone.
func (p *Proxy) writeIngressStatus(ing *networkingv1.Ingress, addr string) error {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	ingresses := p.client.NetworkingV1().Ingresses(ing.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := ingresses.Get(ctx, ing.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.UID != ing.UID || !p.ourClass(cur) || notServed(cur) != "" || hasIngressIP(cur, addr) {
			return nil
		}
		cur.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: addr}}
		_, err = ingresses.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// ingressKey is an Ingress's key, "namespace/name".
func ingressKey(ing *networkingv1.Ingress) string { return ing.Namespace + "/" + ing.Name }
