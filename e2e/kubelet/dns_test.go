package kubelet

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodDNS(t *testing.T) {
	node := parseResolvConf([]byte("# host\nnameserver 10.255.255.53\nnameserver 10.255.255.54 ; two\ndomain ignored.example\nsearch corp.example\noptions timeout:2\n"))
	pod := func(policy corev1.DNSPolicy, hostNet bool, dc *corev1.PodDNSConfig) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo"},
			Spec: corev1.PodSpec{DNSPolicy: policy, HostNetwork: hostNet, DNSConfig: dc}}
	}
	cluster := []string{"10.101.0.3"}
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		clusterDNS []string
		want       string
	}{
		{"ClusterFirst", pod("", false, nil), cluster,
			"nameserver 10.101.0.3\nsearch demo.svc.cluster.local svc.cluster.local cluster.local corp.example\noptions ndots:5\n"},
		{"ClusterFirst on the host network is Default", pod(corev1.DNSClusterFirst, true, nil), cluster,
			"nameserver 10.255.255.53\nnameserver 10.255.255.54\nsearch corp.example\noptions timeout:2\n"},
		{"ClusterFirstWithHostNet", pod(corev1.DNSClusterFirstWithHostNet, true, nil), cluster,
			"nameserver 10.101.0.3\nsearch demo.svc.cluster.local svc.cluster.local cluster.local corp.example\noptions ndots:5\n"},
		{"ClusterFirst without cluster DNS is Default", pod(corev1.DNSClusterFirst, false, nil), nil,
			"nameserver 10.255.255.53\nnameserver 10.255.255.54\nsearch corp.example\noptions timeout:2\n"},
		{"None with dnsConfig", pod(corev1.DNSNone, false, &corev1.PodDNSConfig{Nameservers: []string{"1.2.3.4"},
			Searches: []string{"a.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}}}), cluster,
			"nameserver 1.2.3.4\nsearch a.example\noptions ndots:2\n"},
		{"ClusterFirst with dnsConfig", pod("", false, &corev1.PodDNSConfig{Nameservers: []string{"10.101.0.3", "1.2.3.4"},
			Searches: []string{"svc.cluster.local", "b.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}, {Name: "edns0"}}}), cluster,
			"nameserver 10.101.0.3\nnameserver 1.2.3.4\nsearch demo.svc.cluster.local svc.cluster.local cluster.local corp.example b.example\noptions ndots:1 edns0\n"},
	} {
		got := podDNS(tc.pod, tc.clusterDNS, "cluster.local", node).String()
		want := "# Kubernetes-managed resolv.conf (process kubelet).\n" + tc.want
		if got != want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, got, want)
		}
	}
}
