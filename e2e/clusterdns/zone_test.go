package clusterdns

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// testZone is a Zone over fixed objects: ns "demo" with a ClusterIP Service "front", a headless
// Service "kc-brokers" with ready kc-0 and not-ready kc-1, an ExternalName Service "ext", and a
// pod at 10.101.1.7.
func testZone(t *testing.T) *Zone {
	t.Helper()
	z := &Zone{
		domain:   "cluster.local.",
		services: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		slices:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{BySlicesService: SlicesByService}),
		pods: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byPodIP: func(obj any) ([]string, error) {
			return []string{obj.(*corev1.Pod).Status.PodIP}, nil
		}}),
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "demo", Name: name} }
	for _, s := range []*corev1.Service{
		{ObjectMeta: meta("front"), Spec: corev1.ServiceSpec{ClusterIP: "10.96.4.5", ClusterIPs: []string{"10.96.4.5"}}},
		{ObjectMeta: meta("kc-brokers"), Spec: corev1.ServiceSpec{ClusterIP: "None", ClusterIPs: []string{"None"}}},
		{ObjectMeta: meta("empty"), Spec: corev1.ServiceSpec{ClusterIP: "None", ClusterIPs: []string{"None"}}},
		{ObjectMeta: meta("ext"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.org"}},
	} {
		if err := z.services.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "kc-brokers-abc",
			Labels: map[string]string{discoveryv1.LabelServiceName: "kc-brokers"}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.101.1.2"}, Hostname: ptr.To("kc-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.101.2.2"}, Hostname: ptr.To("kc-1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{Addresses: []string{"10.101.3.2"}, Hostname: ptr.To("kc-2")},
		},
	}
	if err := z.slices.Add(slice); err != nil {
		t.Fatal(err)
	}
	if err := z.pods.Add(&corev1.Pod{ObjectMeta: meta("client"), Status: corev1.PodStatus{PodIP: "10.101.1.7"}}); err != nil {
		t.Fatal(err)
	}
	return z
}

func TestAnswer(t *testing.T) {
	z := testZone(t)
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		want  string // answers' data, space-separated, in order
	}{
		{"front.demo.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "10.96.4.5"},
		{"FRONT.Demo.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "10.96.4.5"},
		{"front.demo.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, ""},
		{"front.demo.svc.cluster.local.", dns.TypeTXT, dns.RcodeSuccess, ""},
		{"kc-brokers.demo.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "10.101.1.2 10.101.3.2"},
		{"kc-0.kc-brokers.demo.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "10.101.1.2"},
		{"kc-1.kc-brokers.demo.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
		{"kc-9.kc-brokers.demo.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
		{"empty.demo.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, ""},
		{"ext.demo.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "example.org."},
		{"nosuch.demo.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
		{"front.other.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
		// The search path's tries: <name>.<ns>.svc.cluster.local first, then shorter suffixes.
		{"kc-0.kc-brokers.demo.svc.demo.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
		{"10-101-1-7.demo.pod.cluster.local.", dns.TypeA, dns.RcodeSuccess, "10.101.1.7"},
		{"10-101-1-8.demo.pod.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
		{"svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, ""},
		{"demo.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, ""},
		{"web-0.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
		{"5.4.96.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, "front.demo.svc.cluster.local."},
		{"2.1.101.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, "kc-0.kc-brokers.demo.svc.cluster.local."},
		{"7.1.101.10.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, ""},
	} {
		answers, rcode, ok := z.Answer(dns.Question{Name: tc.name, Qtype: tc.qtype, Qclass: dns.ClassINET})
		var got []string
		for _, rr := range answers {
			got = append(got, strings.TrimPrefix(rr.String(), rr.Header().String()))
		}
		if !ok || rcode != tc.rcode || strings.Join(got, " ") != tc.want {
			t.Errorf("%s %s: ok %v rcode %s answers %q, want rcode %s answers %q", tc.name, dns.TypeToString[tc.qtype],
				ok, dns.RcodeToString[rcode], got, dns.RcodeToString[tc.rcode], tc.want)
		}
	}
	for _, name := range []string{"example.org.", "localhost.", "8.8.8.8.in-addr.arpa."} {
		if _, _, ok := z.Answer(dns.Question{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}); ok {
			t.Errorf("%s: answered, want it refused (not the zone's)", name)
		}
	}
}
