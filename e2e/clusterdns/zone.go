// Package clusterdns is the harness' cluster DNS: the records kube-dns/CoreDNS serve for a
// cluster (the Kubernetes DNS-Based Service Discovery specification), computed from Services,
// EndpointSlices and Pods watched through a client, and a DNS server (github.com/miekg/dns) that
// answers from them. See e2e/README.md ("Cluster DNS").
package clusterdns

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// TTL of every answer, in seconds: CoreDNS's kubernetes plugin default. Short, so that a client
// that caches still sees a rescheduled pod's new address soon.
const TTL = 5

// Zone is the cluster's DNS data: <svc>.<ns>.svc.<domain>, <hostname>.<svc>.<ns>.svc.<domain>,
// <a-b-c-d>.<ns>.pod.<domain> and the reverse (PTR) names of service and endpoint addresses.
type Zone struct {
	domain   string // "cluster.local." (FQDN, lower case)
	services cache.Indexer
	slices   cache.Indexer
	pods     cache.Indexer
	synced   []cache.InformerSynced
}

const (
	// BySlicesService names the EndpointSlice index SlicesByService.
	BySlicesService = "service"
	byPodIP         = "ip"
)

// SlicesByService indexes EndpointSlices by "<ns>/<service>", from their
// kubernetes.io/service-name label.
func SlicesByService(obj any) ([]string, error) {
	s := obj.(*discoveryv1.EndpointSlice)
	if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
		return []string{s.Namespace + "/" + name}, nil
	}
	return nil, nil
}

// NewZone watches client's Services, EndpointSlices and Pods until ctx ends; domain is the
// cluster domain ("cluster.local"). Call WaitSynced before answering.
func NewZone(ctx context.Context, client kubernetes.Interface, domain string) *Zone {
	f := informers.NewSharedInformerFactory(client, 0)
	svc := f.Core().V1().Services().Informer()
	eps := f.Discovery().V1().EndpointSlices().Informer()
	pods := f.Core().V1().Pods().Informer()
	_ = eps.AddIndexers(cache.Indexers{BySlicesService: SlicesByService})
	_ = pods.AddIndexers(cache.Indexers{byPodIP: func(obj any) ([]string, error) {
		var ips []string
		for _, ip := range obj.(*corev1.Pod).Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return ips, nil
	}})
	f.Start(ctx.Done())
	return &Zone{
		domain:   dns.Fqdn(strings.ToLower(domain)),
		services: svc.GetIndexer(), slices: eps.GetIndexer(), pods: pods.GetIndexer(),
		synced: []cache.InformerSynced{svc.HasSynced, eps.HasSynced, pods.HasSynced},
	}
}

// WaitSynced waits until the first list of every watched kind has arrived.
func (z *Zone) WaitSynced(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), z.synced...) {
		return fmt.Errorf("cluster DNS: caches not synced: %w", ctx.Err())
	}
	return nil
}

// Domain is the zone's cluster domain as a FQDN ("cluster.local.").
func (z *Zone) Domain() string { return z.domain }

// Answer resolves one question. ok is false when the name is not the zone's to answer (outside
// the cluster domain and not a reverse name of a cluster address): the server refuses it, there
// being no upstream to forward to. Otherwise rcode is NameError for a name that does not exist
// and Success (with no answer for a type the name does not have) for one that does.
func (z *Zone) Answer(q dns.Question) (answers []dns.RR, rcode int, ok bool) {
	name := strings.ToLower(q.Name)
	if strings.HasSuffix(name, ".in-addr.arpa.") || strings.HasSuffix(name, ".ip6.arpa.") {
		return z.reverse(q, name)
	}
	if name != z.domain && !strings.HasSuffix(name, "."+z.domain) {
		return nil, 0, false
	}
	rel := strings.TrimSuffix(strings.TrimSuffix(name, z.domain), ".")
	var labels []string
	if rel != "" {
		labels = strings.Split(rel, ".")
	}
	n := len(labels)
	var ips []string
	var target string // ExternalName
	found := false
	switch {
	case n == 3 && labels[2] == "svc":
		ips, target, found = z.service(labels[1], labels[0])
	case n == 4 && labels[3] == "svc":
		ips, found = z.endpointHost(labels[2], labels[1], labels[0])
	case n == 3 && labels[2] == "pod":
		ips, found = z.pod(labels[1], labels[0])
	case n <= 1:
		// The domain itself, svc.<domain> and pod.<domain> exist (they have names below
		// them), with no records of their own.
		found = n == 0 || labels[0] == "svc" || labels[0] == "pod"
	case n == 2 && labels[1] == "svc":
		// So does <ns>.svc.<domain> while the namespace has a Service.
		for _, obj := range z.services.List() {
			found = found || obj.(*corev1.Service).Namespace == labels[0]
		}
	}
	if !found {
		return nil, dns.RcodeNameError, true
	}
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: TTL}
	}
	if target != "" {
		return []dns.RR{&dns.CNAME{Hdr: hdr(dns.TypeCNAME), Target: dns.Fqdn(target)}}, dns.RcodeSuccess, true
	}
	for _, s := range ips {
		ip := net.ParseIP(s)
		switch {
		case ip == nil:
		case ip.To4() != nil && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
			answers = append(answers, &dns.A{Hdr: hdr(dns.TypeA), A: ip.To4()})
		case ip.To4() == nil && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
			answers = append(answers, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: ip})
		}
	}
	return answers, dns.RcodeSuccess, true
}

// SOA is the zone's start of authority, put in the authority section of negative answers so
// that resolvers cache them for TTL seconds only.
func (z *Zone) SOA() dns.RR {
	return &dns.SOA{
		Hdr: dns.RR_Header{Name: z.domain, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: TTL},
		Ns:  "ns.dns." + z.domain, Mbox: "hostmaster." + z.domain,
		Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: TTL,
	}
}

// service is what <name>.<ns>.svc answers: the cluster IPs of a ClusterIP (or NodePort,
// LoadBalancer) Service, the ready endpoint addresses of a headless one, the external name of an
// ExternalName one.
func (z *Zone) service(ns, name string) (ips []string, externalName string, found bool) {
	obj, exists, _ := z.services.GetByKey(ns + "/" + name)
	if !exists {
		return nil, "", false
	}
	svc := obj.(*corev1.Service)
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return nil, svc.Spec.ExternalName, true
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		for _, ep := range z.readyEndpoints(ns, name) {
			ips = append(ips, ep.Addresses...)
		}
		return dedupe(ips), "", true
	default:
		ips = svc.Spec.ClusterIPs
		if len(ips) == 0 && svc.Spec.ClusterIP != "" {
			ips = []string{svc.Spec.ClusterIP}
		}
		return ips, "", true
	}
}

// endpointHost is what <host>.<svc>.<ns>.svc answers: the addresses of the Service's ready
// endpoints whose hostname is host (a pod with spec.hostname and spec.subdomain = the Service's
// name, as a StatefulSet's pods behind their headless Service). The EndpointSlice controller
// counts every endpoint as ready when the Service publishes not-ready addresses.
func (z *Zone) endpointHost(ns, svc, host string) ([]string, bool) {
	if _, exists, _ := z.services.GetByKey(ns + "/" + svc); !exists {
		return nil, false
	}
	var ips []string
	for _, ep := range z.readyEndpoints(ns, svc) {
		if ep.Hostname != nil && strings.EqualFold(*ep.Hostname, host) {
			ips = append(ips, ep.Addresses...)
		}
	}
	return dedupe(ips), len(ips) > 0
}

// pod is what <a-b-c-d>.<ns>.pod answers: the address, if a pod of ns has it (CoreDNS's
// "pods verified" mode).
func (z *Zone) pod(ns, dashed string) ([]string, bool) {
	ip := net.ParseIP(strings.ReplaceAll(dashed, "-", "."))
	if ip == nil {
		ip = net.ParseIP(strings.ReplaceAll(dashed, "-", ":"))
	}
	if ip == nil {
		return nil, false
	}
	objs, _ := z.pods.ByIndex(byPodIP, ip.String())
	for _, obj := range objs {
		if obj.(*corev1.Pod).Namespace == ns {
			return []string{ip.String()}, true
		}
	}
	return nil, false
}

// readyEndpoints are the endpoints of the Service's slices that are ready (a nil ready
// condition means ready, per the EndpointSlice API).
func (z *Zone) readyEndpoints(ns, svc string) []discoveryv1.Endpoint {
	objs, _ := z.slices.ByIndex(BySlicesService, ns+"/"+svc)
	var out []discoveryv1.Endpoint
	for _, obj := range objs {
		for _, ep := range obj.(*discoveryv1.EndpointSlice).Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out = append(out, ep)
			}
		}
	}
	return out
}

// reverse answers PTR questions for service cluster IPs (<svc>.<ns>.svc) and for endpoint
// addresses with a hostname (<host>.<svc>.<ns>.svc); other addresses of the cluster's ranges are
// NXDOMAIN. Reverse names are only the zone's when it knows the address.
func (z *Zone) reverse(q dns.Question, name string) ([]dns.RR, int, bool) {
	ip := reverseIP(name)
	if ip == nil {
		return nil, 0, false
	}
	var names []string
	for _, obj := range z.services.List() {
		svc := obj.(*corev1.Service)
		for _, cip := range svc.Spec.ClusterIPs {
			if net.ParseIP(cip).Equal(ip) {
				names = append(names, fmt.Sprintf("%s.%s.svc.%s", svc.Name, svc.Namespace, z.domain))
			}
		}
	}
	for _, obj := range z.slices.List() {
		s := obj.(*discoveryv1.EndpointSlice)
		svc := s.Labels[discoveryv1.LabelServiceName]
		for _, ep := range s.Endpoints {
			if ep.Hostname == nil || svc == "" {
				continue
			}
			for _, a := range ep.Addresses {
				if net.ParseIP(a).Equal(ip) {
					names = append(names, fmt.Sprintf("%s.%s.%s.svc.%s", *ep.Hostname, svc, s.Namespace, z.domain))
				}
			}
		}
	}
	names = dedupe(names)
	if len(names) == 0 {
		if objs, _ := z.pods.ByIndex(byPodIP, ip.String()); len(objs) == 0 {
			return nil, 0, false
		}
		return nil, dns.RcodeNameError, true
	}
	var answers []dns.RR
	if q.Qtype == dns.TypePTR || q.Qtype == dns.TypeANY {
		for _, n := range names {
			answers = append(answers, &dns.PTR{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: TTL},
				Ptr: n,
			})
		}
	}
	return answers, dns.RcodeSuccess, true
}

// reverseIP parses 4.3.2.1.in-addr.arpa. (or the nibble form under ip6.arpa.); nil if it is not
// a whole address.
func reverseIP(name string) net.IP {
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa."); ok {
		parts := strings.Split(rest, ".")
		if len(parts) != 4 {
			return nil
		}
		return net.ParseIP(parts[3] + "." + parts[2] + "." + parts[1] + "." + parts[0]).To4()
	}
	if rest, ok := strings.CutSuffix(name, ".ip6.arpa."); ok {
		parts := strings.Split(rest, ".")
		if len(parts) != 32 {
			return nil
		}
		var b strings.Builder
		for i := 31; i >= 0; i-- {
			b.WriteString(parts[i])
			if i%4 == 0 && i > 0 {
				b.WriteByte(':')
			}
		}
		return net.ParseIP(b.String())
	}
	return nil
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
