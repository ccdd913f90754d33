package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

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
// host path. Files of configMap/secret/projected volumes are written once when the pod starts
// (a real kubelet also refreshes them; tests that need that recreate the pod).
func (w *podWorker) prepareVolumes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range w.pod.Spec.Volumes {
		dir := filepath.Join(w.dir, "volumes", v.Name)
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
		case v.ConfigMap != nil:
			err = w.writeConfigMap(ctx, dir, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, mode(v.ConfigMap.DefaultMode))
		case v.Secret != nil:
			err = w.writeSecret(ctx, dir, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, mode(v.Secret.DefaultMode))
		case v.DownwardAPI != nil:
			err = w.writeDownward(dir, v.DownwardAPI.Items, mode(v.DownwardAPI.DefaultMode))
		case v.Projected != nil:
			err = w.writeProjected(ctx, dir, v.Projected)
		default:
			err = fmt.Errorf("volume type not supported by the process kubelet")
		}
		if err != nil {
			// The kubelet's words, which users and the operator's diagnosis know.
			return nil, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", v.Name, err)
		}
		out[v.Name] = dir
	}
	return out, nil
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

func (w *podWorker) writeConfigMap(ctx context.Context, dir, name string, items []corev1.KeyToPath, optional *bool, m os.FileMode) error {
	cm, err := w.k.client.CoreV1().ConfigMaps(w.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return os.MkdirAll(dir, 0o755)
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
	return writeKeys(dir, data, items, m)
}

func (w *podWorker) writeSecret(ctx context.Context, dir, name string, items []corev1.KeyToPath, optional *bool, m os.FileMode) error {
	s, err := w.k.client.CoreV1().Secrets(w.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return os.MkdirAll(dir, 0o755)
		}
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("secret %q not found", name)
		}
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return writeKeys(dir, s.Data, items, m)
}

func (w *podWorker) writeDownward(dir string, items []corev1.DownwardAPIVolumeFile, m os.FileMode) error {
	data := map[string][]byte{}
	var keys []corev1.KeyToPath
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
		data[it.Path] = []byte(v)
		keys = append(keys, corev1.KeyToPath{Key: it.Path, Path: it.Path, Mode: it.Mode})
	}
	return writeKeys(dir, data, keys, m)
}

// writeProjected writes all sources of a projected volume into one directory; this is also how
// the ServiceAccount admission plugin's kube-api-access-* volume (token, ca.crt, namespace)
// reaches /var/run/secrets/kubernetes.io/serviceaccount.
func (w *podWorker) writeProjected(ctx context.Context, dir string, p *corev1.ProjectedVolumeSource) error {
	m := mode(p.DefaultMode)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, src := range p.Sources {
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			err = w.writeToken(ctx, dir, src.ServiceAccountToken, m)
		case src.ConfigMap != nil:
			err = w.writeConfigMap(ctx, dir, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, m)
		case src.Secret != nil:
			err = w.writeSecret(ctx, dir, src.Secret.Name, src.Secret.Items, src.Secret.Optional, m)
		case src.DownwardAPI != nil:
			err = w.writeDownward(dir, src.DownwardAPI.Items, m)
		default:
			err = fmt.Errorf("projected source not supported by the process kubelet")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeToken asks the apiserver for a token bound to this pod, as the kubelet does (the Node
// authorizer only lets a node do so for pods bound to it).
func (w *podWorker) writeToken(ctx context.Context, dir string, src *corev1.ServiceAccountTokenProjection, m os.FileMode) error {
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
	return os.WriteFile(filepath.Join(dir, src.Path), []byte(tr.Status.Token), m)
}

func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath, m os.FileMode) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if len(items) == 0 {
		for _, k := range sortedKeys(data) {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("key %s not found", it.Key)
		}
		path := filepath.Join(dir, it.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		fm := m
		if it.Mode != nil {
			fm = os.FileMode(*it.Mode)
		}
		if err := os.WriteFile(path, v, fm); err != nil {
			return err
		}
		if err := os.Chmod(path, fm); err != nil {
			return err
		}
	}
	return nil
}

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
