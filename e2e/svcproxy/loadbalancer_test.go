package svcproxy

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// lbTest is a Proxy's load balancer over a fake apiserver whose Services the test also puts in
// the proxy's cache by hand, so the cache can lag behind the proxy's own writes as an informer's
// does.
type lbTest struct {
	t      *testing.T
	p      *Proxy
	client *fake.Clientset
	age    int
}

func newLBTest(t *testing.T) *lbTest {
	client := fake.NewClientset()
	// The fake does not generate names; the apiserver does, for the proxy's Events.
	n := 0
	client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		if ev.Name == "" {
			n++
			ev.Name = ev.GenerateName + strconv.Itoa(n)
		}
		return false, nil, nil
	})
	p := &Proxy{ctx: context.Background(), client: client, pool: netip.MustParsePrefix("172.30.1.0/24"),
		services: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		logf:     t.Logf, poke: func() {}, held: map[string]holding{}, warned: map[string]string{}}
	return &lbTest{t: t, p: p, client: client}
}

// add creates a LoadBalancer Service (younger than the ones before) in the apiserver and cache.
func (lt *lbTest) add(name, wantIP, ingress string) *corev1.Service {
	lt.age++
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"),
			CreationTimestamp: metav1.NewTime(time.Unix(int64(lt.age), 0))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: wantIP,
			Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if ingress != "" {
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ingress}}
	}
	if _, err := lt.client.CoreV1().Services("ns").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		lt.t.Fatal(err)
	}
	lt.cached(svc)
	return svc
}

// cached puts svc in the proxy's cache, as its informer would.
func (lt *lbTest) cached(svc *corev1.Service) {
	if err := lt.p.services.Update(svc); err != nil {
		lt.t.Fatal(err)
	}
}

// ingress is the Service's load-balancer address in the apiserver ("" for none).
func (lt *lbTest) ingress(name string) string {
	svc, err := lt.client.CoreV1().Services("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		lt.t.Fatal(err)
	}
	if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 {
		return ing[0].IP
	}
	return ""
}

func (lt *lbTest) expect(name, want string) {
	lt.t.Helper()
	if got := lt.ingress(name); got != want {
		lt.t.Errorf("%s: ingress %q, want %q", name, got, want)
	}
}

// events are the reasons of the Events on Service name.
func (lt *lbTest) events(name string) string {
	list, err := lt.client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		lt.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return strings.Join(out, "\n")
}

func TestLoadBalancerAssignsAndReleases(t *testing.T) {
	lt := newLBTest(t)
	lt.add("auto", "", "")
	lt.add("fixed", "172.30.1.10", "")
	lt.add("outside", "10.0.0.1", "")
	lt.add("broadcast", "172.30.1.255", "")
	lt.p.balance()
	lt.expect("auto", "172.30.1.1")
	lt.expect("fixed", "172.30.1.10")
	lt.expect("outside", "")
	lt.expect("broadcast", "")
	if ev := lt.events("outside"); !strings.Contains(ev, "AllocationFailed") || !strings.Contains(ev, "not an address of the pool") {
		t.Errorf("outside: events %q", ev)
	}

	// The cache has not seen the writes yet: nothing moves, and an address held is in use.
	lt.add("wants-auto", "172.30.1.1", "")
	lt.add("second", "", "")
	lt.p.balance()
	lt.p.balance()
	lt.expect("auto", "172.30.1.1")
	lt.expect("wants-auto", "")
	lt.expect("second", "172.30.1.2")
	if ev := lt.events("wants-auto"); strings.Count(ev, "AllocationFailed") != 1 || !strings.Contains(ev, "in use by ns/auto") {
		t.Errorf("wants-auto: events %q (one AllocationFailed, however many syncs)", ev)
	}

	// Deleted: its address goes to the Service that asked for it.
	if err := lt.p.services.Delete(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "auto"}}); err != nil {
		t.Fatal(err)
	}
	lt.p.balance()
	lt.expect("wants-auto", "172.30.1.1")

	// Another type: released (the apiserver clears its status itself); the lowest free address
	// is the next one's.
	fixed, _ := lt.client.CoreV1().Services("ns").Get(context.Background(), "fixed", metav1.GetOptions{})
	fixed.Spec.Type = corev1.ServiceTypeClusterIP
	lt.cached(fixed)
	lt.p.balance()
	if _, ok := lt.p.held["ns/fixed"]; ok {
		t.Errorf("fixed still holds %v", lt.p.held["ns/fixed"])
	}
	lt.add("third", "172.30.1.10", "")
	lt.p.balance()
	lt.expect("third", "172.30.1.10")
}

// A restarted proxy keeps the addresses the Services' status names; of two Services naming one
// address, the older keeps it.
func TestLoadBalancerKeepsStatusAddresses(t *testing.T) {
	lt := newLBTest(t)
	lt.add("old", "", "172.30.1.7")
	lt.add("young", "", "172.30.1.7")
	lt.add("new", "", "")
	other := lt.add("other-class", "", "")
	other.Spec.LoadBalancerClass = ptr("example.com/other")
	lt.cached(other)
	lt.p.balance()
	lt.expect("old", "172.30.1.7")
	lt.expect("young", "172.30.1.1")
	lt.expect("new", "172.30.1.2")
	lt.expect("other-class", "")
}

func ptr[T any](v T) *T { return &v }
