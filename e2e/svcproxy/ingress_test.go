package svcproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"kaas/e2e/clusterdns"
)

// ingressTest is a Proxy's ingress controller over caches the test fills by hand and a fake
// apiserver for the status writes.
type ingressTest struct {
	t      *testing.T
	p      *Proxy
	client *fake.Clientset
	age    int
}

func newIngressTest(t *testing.T) *ingressTest {
	client := fake.NewClientset()
	p := &Proxy{ctx: context.Background(), client: client, logf: t.Logf, poke: func() {},
		services:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		slices:    cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{clusterdns.BySlicesService: clusterdns.SlicesByService}),
		ingresses: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		ingress: IngressOptions{Classes: []string{"nginx", "kafka"}, Listen: "127.0.0.1:443",
			PublishService: "ingress-nginx/ingress-nginx-controller"},
		described: map[string]string{}}
	return &ingressTest{t: t, p: p, client: client}
}

// backend serves TLS on a loopback port with a certificate for name and writes name to each
// client; a Service name (its port 9093 named "tls") and its EndpointSlice lead there.
func (it *ingressTest) backend(name string) {
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{selfSigned(it.t, name)}})
	if err != nil {
		it.t.Fatal(err)
	}
	it.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(conn, name)
			conn.Close()
		}
	}()
	port := int32(l.Addr().(*net.TCPAddr).Port)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tls", Port: 9093}}}}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-x",
			Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}}},
		Ports:     []discoveryv1.EndpointPort{{Name: ptr("tls"), Port: &port}},
	}
	if err := it.p.services.Add(svc); err != nil {
		it.t.Fatal(err)
	}
	if err := it.p.slices.Add(slice); err != nil {
		it.t.Fatal(err)
	}
}

// add creates an Ingress (younger than the ones before) of class with one rule, host → the
// Service port 9093 of backend, in the apiserver and the cache; passthrough adds the annotation.
func (it *ingressTest) add(name, class, host, backend string, passthrough bool) {
	it.age++
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"),
			CreationTimestamp: metav1.NewTime(time.Unix(int64(it.age), 0)), Annotations: map[string]string{}},
		Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{{Host: host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: ptr(networkingv1.PathTypePrefix),
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
						Name: backend, Port: networkingv1.ServiceBackendPort{Number: 9093}}}}}}}}}},
	}
	if passthrough {
		ing.Annotations[PassthroughAnnotation] = "true"
	}
	if _, err := it.client.NetworkingV1().Ingresses("ns").Create(context.Background(), ing, metav1.CreateOptions{}); err != nil {
		it.t.Fatal(err)
	}
	if err := it.p.ingresses.Add(ing); err != nil {
		it.t.Fatal(err)
	}
}

// dial connects through the controller at addr with TLS and server name sni (none when ""),
// and returns the backend's certificate name and what it wrote, or the error.
func dial(addr, sni string) (cert, said string, err error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: sni, InsecureSkipVerify: true})
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(conn)
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, string(b), err
}

func TestIngressPassthrough(t *testing.T) {
	it := newIngressTest(t)
	it.backend("a.example")
	it.backend("b.example")
	it.add("a", "nginx", "a.example", "a.example", true)
	it.add("b", "kafka", "B.example", "b.example", true) // host names match whatever their case
	it.add("a-later", "nginx", "a.example", "b.example", true)
	it.add("http", "nginx", "c.example", "a.example", false)
	it.add("other-class", "other", "d.example", "a.example", true)
	it.add("no-service", "nginx", "e.example", "gone", true)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go it.p.serveIngress(l)
	addr := l.Addr().String()

	for sni, want := range map[string]string{"a.example": "a.example", "b.example": "b.example"} {
		// The backend's own certificate: TLS ends there, not in the controller.
		if cert, said, err := dial(addr, sni); err != nil || cert != want || said != want {
			t.Errorf("server name %s: certificate %q, read %q, %v; want %s's", sni, cert, said, err, want)
		}
	}
	for _, sni := range []string{"", "c.example", "d.example", "e.example", "unknown.example"} {
		if cert, _, err := dial(addr, sni); err == nil {
			t.Errorf("server name %q: reached %s, want the connection closed", sni, cert)
		}
	}
	// Not TLS at all: closed without an answer (reset, as the request is left unread).
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(conn); len(b) != 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("HTTP: read %q, %v; want the connection closed", b, err)
	}
}

// A port named rather than numbered, and a Service port other than its EndpointSlice's.
func TestIngressServicePort(t *testing.T) {
	it := newIngressTest(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kc-external-0"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "plain", Port: 9092}, {Name: "external", Port: 9093},
			{Name: "udp", Port: 9094, Protocol: corev1.ProtocolUDP}}}}
	_ = it.p.services.Add(svc)
	for _, tc := range []struct {
		port networkingv1.ServiceBackendPort
		want string
	}{
		{networkingv1.ServiceBackendPort{Number: 9093}, "external"},
		{networkingv1.ServiceBackendPort{Name: "plain"}, "plain"},
		{networkingv1.ServiceBackendPort{Number: 9094}, ""},
		{networkingv1.ServiceBackendPort{Name: "nope"}, ""},
	} {
		to, err := it.p.servicePort("ns", &networkingv1.IngressServiceBackend{Name: "kc-external-0", Port: tc.port})
		if to.port != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("port %+v: %+v, %v; want the Service port %q", tc.port, to, err, tc.want)
		}
	}
}

// Served Ingresses get the controller Service's address in their status, through the status
// subresource and again after a conflict; the others are left alone.
func TestIngressPublish(t *testing.T) {
	it := newIngressTest(t)
	conflicts := 0
	it.client.PrependReactor("update", "ingresses", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"}, "a", nil)
		}
		return false, nil, nil
	})
	it.add("a", "nginx", "a.example", "a", true)
	it.add("http", "nginx", "c.example", "a", false)
	it.add("other-class", "other", "d.example", "a", true)
	status := func(name string) string {
		ing, err := it.client.NetworkingV1().Ingresses("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if lb := ing.Status.LoadBalancer.Ingress; len(lb) > 0 {
			return lb[0].IP
		}
		return ""
	}

	it.p.publish() // the controller's Service has no address yet
	if got := status("a"); got != "" {
		t.Errorf("a: status %q before the controller has an address", got)
	}
	lb := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress-nginx", Name: "ingress-nginx-controller"},
		Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "172.30.1.1"}}}}}
	_ = it.p.services.Add(lb)
	it.p.publish()
	for name, want := range map[string]string{"a": "172.30.1.1", "http": "", "other-class": ""} {
		if got := status(name); got != want {
			t.Errorf("%s: status.loadBalancer.ingress %q, want %q", name, got, want)
		}
	}
	if conflicts != 1 {
		t.Errorf("%d conflicts, want the one the test made", conflicts)
	}
	if d := it.p.described["ns/http"]; d == "" || it.p.described["ns/other-class"] != "" {
		t.Errorf("log: %q", it.p.described)
	}
}
