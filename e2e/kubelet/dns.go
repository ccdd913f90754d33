package kubelet

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Limits the kubelet applies to a pod's resolv.conf (pkg/kubelet/network/dns).
const (
	maxNameservers = 3
	maxSearches    = 32
)

// resolvConf is the content of a resolv.conf: what the kubelet reads from the node's and writes
// for a pod.
type resolvConf struct {
	nameservers, searches, options []string
}

// parseResolvConf reads nameserver, search (or domain) and options lines, as the kubelet reads
// the node's --resolv-conf.
func parseResolvConf(data []byte) resolvConf {
	var rc resolvConf
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line, _, _ = strings.Cut(line, ";")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) > 1 {
				rc.nameservers = append(rc.nameservers, f[1])
			}
		case "domain", "search":
			// The last of either wins, as in resolv.conf(5).
			rc.searches = append([]string(nil), f[1:]...)
		case "options":
			rc.options = append(rc.options, f[1:]...)
		}
	}
	return rc
}

func (rc resolvConf) String() string {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed resolv.conf (process kubelet).\n")
	for _, ns := range rc.nameservers {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	if len(rc.searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(rc.searches, " "))
	}
	if len(rc.options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(rc.options, " "))
	}
	return b.String()
}

// podDNS works out a pod's resolv.conf as the kubelet does: dnsPolicy ClusterFirst (the default)
// → the cluster DNS servers, search <ns>.svc.<domain> svc.<domain> <domain> and the node's own
// search domains, ndots:5 (a hostNetwork pod gets Default instead, and so does every pod when no
// cluster DNS is configured, as with a kubelet without --cluster-dns); ClusterFirstWithHostNet →
// the cluster's; Default → the node's resolv.conf; None → nothing. spec.dnsConfig is then merged
// in (nameservers and searches appended without duplicates, options overriding by name).
func podDNS(pod *corev1.Pod, clusterDNS []string, domain string, node resolvConf) resolvConf {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	if policy == corev1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = corev1.DNSDefault
	}
	if (policy == corev1.DNSClusterFirst || policy == corev1.DNSClusterFirstWithHostNet) && len(clusterDNS) == 0 {
		policy = corev1.DNSDefault
	}
	var rc resolvConf
	switch policy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet:
		rc.nameservers = append([]string(nil), clusterDNS...)
		rc.searches = append([]string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}, node.searches...)
		rc.options = []string{"ndots:5"}
	case corev1.DNSDefault:
		rc = resolvConf{nameservers: append([]string(nil), node.nameservers...),
			searches: append([]string(nil), node.searches...), options: append([]string(nil), node.options...)}
	case corev1.DNSNone:
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		rc.nameservers = appendNew(rc.nameservers, dc.Nameservers...)
		rc.searches = appendNew(rc.searches, dc.Searches...)
		for _, o := range dc.Options {
			opt := o.Name
			if o.Value != nil {
				opt += ":" + *o.Value
			}
			replaced := false
			for i, have := range rc.options {
				if name, _, _ := strings.Cut(have, ":"); name == o.Name {
					rc.options[i], replaced = opt, true
				}
			}
			if !replaced {
				rc.options = append(rc.options, opt)
			}
		}
	}
	rc.searches = appendNew(nil, rc.searches...)
	if len(rc.nameservers) > maxNameservers {
		rc.nameservers = rc.nameservers[:maxNameservers]
	}
	if len(rc.searches) > maxSearches {
		rc.searches = rc.searches[:maxSearches]
	}
	return rc
}

func appendNew(list []string, add ...string) []string {
	for _, s := range add {
		dup := false
		for _, have := range list {
			dup = dup || have == s
		}
		if !dup && s != "" {
			list = append(list, s)
		}
	}
	return list
}

// writeResolvConf writes the pod's /etc/resolv.conf (podDNS) from the node's resolv.conf
// (--resolv-conf) and the cluster DNS (--cluster-dns, --cluster-domain).
func (w *podWorker) writeResolvConf() (string, error) {
	var node resolvConf
	if f := w.k.cfg.ResolvConf; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("node resolv.conf: %w", err)
		}
		node = parseResolvConf(data)
	}
	rc := podDNS(w.pod, w.k.cfg.ClusterDNS, w.k.cfg.ClusterDomain, node)
	path := filepath.Join(w.dir, "resolv.conf")
	return path, os.WriteFile(path, []byte(rc.String()), 0o644)
}
