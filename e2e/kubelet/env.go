package kubelet

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerEnv resolves a container's environment in Kubernetes' order: the service variables
// of the `kubernetes` service, then envFrom, then env, each env value expanded against what was
// defined before it.
// base is where it starts: the image's environment (a pulled image), or the host's PATH.
func (w *podWorker) containerEnv(ctx context.Context, c *corev1.Container, base []string) ([]string, error) {
	k := w.k
	vars := map[string]string{}
	var order []string
	set := func(name, value string) {
		if _, ok := vars[name]; !ok {
			order = append(order, name)
		}
		vars[name] = value
	}
	// Not the host's whole environment: a container only sees what its image and spec give it.
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set(k, v)
		}
	}
	set("HOSTNAME", podHostname(w.pod))
	// NB: pods reach the real apiserver here, not its ClusterIP, which only the harness' service
	// proxy serves (and only inside its network namespace).
	host, port := k.cfg.APIServerHost, strconv.Itoa(k.cfg.APIServerPort)
	hp := host + ":" + port
	set("KUBERNETES_SERVICE_HOST", host)
	set("KUBERNETES_SERVICE_PORT", port)
	set("KUBERNETES_SERVICE_PORT_HTTPS", port)
	set("KUBERNETES_PORT", "tcp://"+hp)
	set("KUBERNETES_PORT_"+port+"_TCP", "tcp://"+hp)
	set("KUBERNETES_PORT_"+port+"_TCP_PROTO", "tcp")
	set("KUBERNETES_PORT_"+port+"_TCP_PORT", port)
	set("KUBERNETES_PORT_"+port+"_TCP_ADDR", host)

	ns := w.pod.Namespace
	for _, from := range c.EnvFrom {
		var data map[string]string
		optional := false
		switch {
		case from.ConfigMapRef != nil:
			optional = from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
			cm, err := k.client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if optional && apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("envFrom configMap %s: %w", from.ConfigMapRef.Name, err)
			}
			data = cm.Data
		case from.SecretRef != nil:
			optional = from.SecretRef.Optional != nil && *from.SecretRef.Optional
			s, err := k.client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if optional && apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
			}
			data = map[string]string{}
			for key, v := range s.Data {
				data[key] = string(v)
			}
		}
		for key, v := range data {
			set(from.Prefix+key, v)
		}
	}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, lookup))
			continue
		}
		v, ok, err := w.envValueFrom(ctx, c, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, name := range order {
		out = append(out, name+"="+vars[name])
	}
	return out, nil
}

func (w *podWorker) envValueFrom(ctx context.Context, c *corev1.Container, src *corev1.EnvVarSource) (string, bool, error) {
	ns := w.pod.Namespace
	switch {
	case src.FieldRef != nil:
		v, err := w.fieldValue(src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := w.resourceValue(c, src.ResourceFieldRef)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := w.k.client.CoreV1().ConfigMaps(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil {
			if v, ok := cm.Data[ref.Key]; ok {
				return v, true, nil
			}
			err = fmt.Errorf("configMap %s has no key %s", ref.Name, ref.Key)
		}
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, err
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := w.k.client.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil {
			if v, ok := s.Data[ref.Key]; ok {
				return string(v), true, nil
			}
			err = fmt.Errorf("secret %s has no key %s", ref.Name, ref.Key)
		}
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, err
	}
	return "", false, fmt.Errorf("unsupported valueFrom")
}

// fieldValue answers a downward-API fieldPath for this pod.
func (w *podWorker) fieldValue(path string) (string, error) {
	p := w.pod
	if key, ok := bracketKey(path, "metadata.labels"); ok {
		return p.Labels[key], nil
	}
	if key, ok := bracketKey(path, "metadata.annotations"); ok {
		return p.Annotations[key], nil
	}
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "metadata.labels":
		return formatMap(p.Labels), nil
	case "metadata.annotations":
		return formatMap(p.Annotations), nil
	case "spec.nodeName":
		return p.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return w.k.cfg.NodeIP, nil
	case "status.podIP", "status.podIPs":
		return w.ip, nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

// resourceValue answers resourceFieldRef: the container's limit (or request), falling back to
// the node's allocatable for an unset limit, divided by the divisor and rounded up.
func (w *podWorker) resourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" {
		for i := range w.pod.Spec.Containers {
			if w.pod.Spec.Containers[i].Name == ref.ContainerName {
				c = &w.pod.Spec.Containers[i]
			}
		}
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("unsupported resource %q", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		q, ok = nodeCapacity()[corev1.ResourceName(name)]
		if !ok {
			return "0", nil
		}
	}
	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(div.MilliValue()))), 10), nil
}

func bracketKey(path, prefix string) (string, bool) {
	if !strings.HasPrefix(path, prefix+"['") || !strings.HasSuffix(path, "']") {
		return "", false
	}
	return path[len(prefix)+2 : len(path)-2], true
}

func formatMap(m map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(m) {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return b.String()
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// podHostname is what a pod's UTS namespace is named: spec.hostname, else the pod name.
func podHostname(p *corev1.Pod) string {
	if p.Spec.Hostname != "" {
		return p.Spec.Hostname
	}
	return p.Name
}
