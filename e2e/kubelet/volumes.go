package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mount is one bind mount pod-init performs in the pod's mount namespace.
type mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
}

// prepareVolumes materialises every volume of the pod on the host and returns volume name →
// host path. The files of configMap, secret, downwardAPI and projected volumes are written with
// writeAtomic (atomic.go: the real kubelet's `..data` layout); resyncVolumes keeps configMap and
// secret ones current while the pod runs.
func (w *podWorker) prepareVolumes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for i := range w.pod.Spec.Volumes {
		v := &w.pod.Spec.Volumes[i]
		dir := w.volumeDir(v.Name)
		var err error
		switch {
		case v.EmptyDir != nil:
			err = os.MkdirAll(dir, 0o777)
		case v.HostPath != nil:
			dir = v.HostPath.Path
			if t := v.HostPath.Type; t != nil && *t == corev1.HostPathDirectoryOrCreate {
				err = os.MkdirAll(dir, 0o755)
			}
		case v.PersistentVolumeClaim != nil:
			dir, err = w.pvcPath(ctx, v.PersistentVolumeClaim.ClaimName)
		case v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil:
			var p payload
			if p, err = w.volumePayload(ctx, v); err == nil {
				_, err = writeAtomic(dir, p)
			}
		default:
			err = fmt.Errorf("volume type not supported by the process kubelet")
		}
		if err != nil {
			return nil, setUpFailed(v.Name, err)
		}
		out[v.Name] = dir
	}
	return out, nil
}

// setUpFailed words a volume's error as the kubelet does, which users and the operator's
// diagnosis know.
func setUpFailed(volume string, err error) error {
	return fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", volume, err)
}

func (w *podWorker) volumeDir(name string) string { return filepath.Join(w.dir, "volumes", name) }

// volumePayload reads the files a configMap, secret, downwardAPI or projected volume should
// hold now.
func (w *podWorker) volumePayload(ctx context.Context, v *corev1.Volume) (payload, error) {
	p := payload{}
	var err error
	switch {
	case v.ConfigMap != nil:
		err = w.configMapPayload(ctx, p, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, mode(v.ConfigMap.DefaultMode))
	case v.Secret != nil:
		err = w.secretPayload(ctx, p, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, mode(v.Secret.DefaultMode))
	case v.DownwardAPI != nil:
		err = w.downwardPayload(p, v.DownwardAPI.Items, mode(v.DownwardAPI.DefaultMode))
	case v.Projected != nil:
		err = w.projectedPayload(ctx, p, v.Projected)
	default:
		err = fmt.Errorf("volume %s has no files to write", v.Name)
	}
	return p, err
}

// resynced says whether resyncVolumes refreshes volume v: configMap and secret volumes, and
// projected volumes made only of configMaps, secrets and downward API files. A projected volume
// with a service-account token keeps the token it got at the start (a real kubelet renews it at
// 80% of its lifetime; refreshing it on every pass would ask for a token every few seconds), and
// downwardAPI volumes keep their files (the fields come from the pod as first seen).
func resynced(v *corev1.Volume) bool {
	switch {
	case v.ConfigMap != nil, v.Secret != nil:
		return true
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				return false
			}
		}
		return true
	}
	return false
}

// resyncVolumes keeps the pod's configMap and secret volumes (see resynced) current until ctx
// ends: every `every` it reads their objects again from the apiserver and, where the files differ
// from what is on disk, swaps in a new version atomically (writeAtomic), as the real kubelet's
// periodic pod sync does (about every minute plus its cache TTL; the harness' default,
// DefaultVolumeResync, is a few seconds so that tests of certificate renewal stay quick).
// Unchanged content writes nothing. An object that is gone leaves the last files in place
// (unless the volume is optional: then its files go, as with the real kubelet), and errors are
// logged and reported as FailedMount events, each new one once.
func (w *podWorker) resyncVolumes(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	reported := map[string]string{} // volume → the error last reported
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.syncVolumes(ctx, reported)
	}
}

// syncVolumes is one pass of resyncVolumes.
func (w *podWorker) syncVolumes(ctx context.Context, reported map[string]string) {
	for i := range w.pod.Spec.Volumes {
		v := &w.pod.Spec.Volumes[i]
		if !resynced(v) {
			continue
		}
		p, err := w.volumePayload(ctx, v)
		changed := false
		if err == nil {
			changed, err = writeAtomic(w.volumeDir(v.Name), p)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			msg := setUpFailed(v.Name, err).Error()
			if reported[v.Name] != msg {
				reported[v.Name] = msg
				w.logf("volume resync (keeping the files it has): %s", msg)
				w.warn(ctx, "FailedMount", msg)
			}
			continue
		}
		delete(reported, v.Name)
		if changed {
			w.logf("volume %s updated", v.Name)
		}
	}
}

// startResync starts resyncVolumes when the pod has volumes to refresh and the kubelet's
// VolumeResync is positive; the returned function stops it and waits until it has.
func (w *podWorker) startResync(parent context.Context) (stop func()) {
	every := w.k.cfg.VolumeResync
	refreshed := false
	for i := range w.pod.Spec.Volumes {
		refreshed = refreshed || resynced(&w.pod.Spec.Volumes[i])
	}
	if every <= 0 || !refreshed {
		return func() {}
	}
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() { defer close(done); w.resyncVolumes(ctx, every) }()
	return func() { cancel(); <-done }
}

// mounts turns a container's volumeMounts into bind mounts, resolving subPath(Expr).
func (w *podWorker) mounts(c *corev1.Container, vols map[string]string, env []string) ([]mount, error) {
	envMap := map[string]string{}
	for _, kv := range env {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				envMap[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	var out []mount
	for _, vm := range c.VolumeMounts {
		src, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %s: no such volume", vm.Name)
		}
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = expand(vm.SubPathExpr, func(k string) (string, bool) { v, ok := envMap[k]; return v, ok })
		}
		if sub != "" {
			src = filepath.Join(src, sub)
			// As the kubelet does, a missing subPath is created as a directory.
			if _, err := os.Stat(src); os.IsNotExist(err) {
				if err := os.MkdirAll(src, 0o777); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, mount{Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
	}
	return out, nil
}

// pvcPath follows a claim to its bound PersistentVolume and returns the host directory behind
// it (hostPath or local volumes, which is what the harness creates).
func (w *podWorker) pvcPath(ctx context.Context, claim string) (string, error) {
	pvc, err := w.k.client.CoreV1().PersistentVolumeClaims(w.pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("claim %s is not bound yet", claim)
	}
	pv, err := w.k.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	switch {
	case pv.Spec.HostPath != nil:
		return w.k.mapPath(pv.Spec.HostPath.Path)
	case pv.Spec.Local != nil:
		return w.k.mapPath(pv.Spec.Local.Path)
	}
	return "", fmt.Errorf("persistentVolume %s is neither hostPath nor local", pv.Name)
}

// mapPath applies this node's path map (Config.PathMapFile, read afresh each time): the longest
// mapped prefix of path is replaced. This lets a test give each simulated host its own view of a
// shared volume, e.g. its own FUSE mount of one backing directory.
func (k *Kubelet) mapPath(path string) (string, error) {
	if k.cfg.PathMapFile == "" {
		return path, nil
	}
	b, err := os.ReadFile(k.cfg.PathMapFile)
	if os.IsNotExist(err) {
		return path, nil
	}
	if err != nil {
		return "", err
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("path map %s: %w", k.cfg.PathMapFile, err)
	}
	best := ""
	for from := range m {
		if (path == from || strings.HasPrefix(path, strings.TrimSuffix(from, "/")+"/")) && len(from) > len(best) {
			best = from
		}
	}
	if best == "" {
		return path, nil
	}
	return m[best] + strings.TrimPrefix(path, best), nil
}

// configMapPayload adds configMap name's files to p. A missing optional configMap adds none.
func (w *podWorker) configMapPayload(ctx context.Context, p payload, name string, items []corev1.KeyToPath, optional *bool, m os.FileMode) error {
	cm, err := w.k.client.CoreV1().ConfigMaps(w.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && isTrue(optional) {
			return nil
		}
		return fmt.Errorf("configMap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keysPayload(p, data, items, isTrue(optional), m)
}

// secretPayload adds secret name's files to p. A missing optional secret adds none.
func (w *podWorker) secretPayload(ctx context.Context, p payload, name string, items []corev1.KeyToPath, optional *bool, m os.FileMode) error {
	s, err := w.k.client.CoreV1().Secrets(w.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && isTrue(optional) {
			return nil
		}
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("secret %q not found", name)
		}
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return keysPayload(p, s.Data, items, isTrue(optional), m)
}

func (w *podWorker) downwardPayload(p payload, items []corev1.DownwardAPIVolumeFile, m os.FileMode) error {
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = w.fieldValue(it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			v, err = w.resourceValue(&w.pod.Spec.Containers[0], it.ResourceFieldRef)
		}
		if err != nil {
			return err
		}
		fm := m
		if it.Mode != nil {
			fm = os.FileMode(*it.Mode)
		}
		p[it.Path] = fileProjection{data: []byte(v), mode: fm}
	}
	return nil
}

// projectedPayload gathers all sources of a projected volume into one payload; this is also how
// the ServiceAccount admission plugin's kube-api-access-* volume (token, ca.crt, namespace)
// reaches /var/run/secrets/kubernetes.io/serviceaccount.
func (w *podWorker) projectedPayload(ctx context.Context, p payload, pv *corev1.ProjectedVolumeSource) error {
	m := mode(pv.DefaultMode)
	for _, src := range pv.Sources {
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			err = w.tokenPayload(ctx, p, src.ServiceAccountToken, m)
		case src.ConfigMap != nil:
			err = w.configMapPayload(ctx, p, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, m)
		case src.Secret != nil:
			err = w.secretPayload(ctx, p, src.Secret.Name, src.Secret.Items, src.Secret.Optional, m)
		case src.DownwardAPI != nil:
			err = w.downwardPayload(p, src.DownwardAPI.Items, m)
		default:
			err = fmt.Errorf("projected source not supported by the process kubelet")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tokenPayload asks the apiserver for a token bound to this pod, as the kubelet does (the Node
// authorizer only lets a node do so for pods bound to it).
func (w *podWorker) tokenPayload(ctx context.Context, p payload, src *corev1.ServiceAccountTokenProjection, m os.FileMode) error {
	sa := w.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: w.pod.Name, UID: w.pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	tr, err := w.k.client.CoreV1().ServiceAccounts(w.pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for serviceaccount %s: %w", sa, err)
	}
	p[src.Path] = fileProjection{data: []byte(tr.Status.Token), mode: m}
	return nil
}

// keysPayload adds the keys of a configMap or secret to p: all of them under their own names,
// or with items only those listed, under their paths. A listed key that is missing is an error,
// unless the volume is optional (then it is left out, as the kubelet does).
func keysPayload(p payload, data map[string][]byte, items []corev1.KeyToPath, optional bool, m os.FileMode) error {
	if len(items) == 0 {
		for k, v := range data {
			p[k] = fileProjection{data: v, mode: m}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf("key %s not found", it.Key)
		}
		fm := m
		if it.Mode != nil {
			fm = os.FileMode(*it.Mode)
		}
		p[it.Path] = fileProjection{data: v, mode: fm}
	}
	return nil
}

func isTrue(b *bool) bool { return b != nil && *b }

func mode(m *int32) os.FileMode {
	if m == nil {
		return 0o644
	}
	return os.FileMode(*m)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
