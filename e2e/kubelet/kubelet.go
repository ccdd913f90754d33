// Package kubelet is the harness' process kubelet: it registers a Node and runs the pods bound to
// it as local processes, with the pod's volumes bind-mounted in a per-pod mount namespace and a
// per-pod IP address. It speaks to the apiserver with a node identity, so the Node authorizer and
// NodeRestriction admission constrain it like a real kubelet.
package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// Config is the process kubelet's command line.
type Config struct {
	Kubeconfig     string
	NodeName       string
	NodeIP         string
	PodPrefix      string // pods get PodPrefix.2 .. PodPrefix.254
	AddAddresses   bool   // give pods their addresses and network namespaces (inside the harness' network namespace)
	RootDir        string // per-pod scratch directories
	LogDir         string // per-pod container logs
	ImagesFile     string
	ImageDir       string            // pulled images, unpacked (default RootDir/images)
	Mirrors        map[string]string // registry host → host:port to pull its images from
	PathMapFile    string            // JSON {host path prefix: replacement} for PV paths, re-read per pod
	APIServerHost  string
	APIServerPort  int
	KubeletVersion string
	// ClusterDNS are the nameservers of pods with dnsPolicy ClusterFirst (none: such pods get
	// the node's resolv.conf, as with a kubelet without --cluster-dns); ClusterDomain is the
	// cluster's DNS domain; ResolvConf is the node's resolv.conf (dnsPolicy Default).
	ClusterDNS    []string
	ClusterDomain string
	ResolvConf    string
	// VolumeResync is how often running pods' configMap and secret volumes are read again from
	// the apiserver and updated when their objects changed (0: DefaultVolumeResync; negative:
	// never, files stay as written at the start).
	VolumeResync time.Duration
}

// DefaultVolumeResync is the process kubelet's default Config.VolumeResync: far shorter than a
// real kubelet's (its pod sync, about a minute, plus its cache TTL: 60-90 s in all), so that a
// test of a renewed certificate waits seconds, not minutes.
const DefaultVolumeResync = 5 * time.Second

// Kubelet runs the pods of one node.
type Kubelet struct {
	cfg    Config
	client kubernetes.Interface
	images imageTable
	store  *imageStore // images not in the table are pulled into it
	self   string      // this binary, re-executed as pod-init
	port   int         // of the HTTPS endpoint (kubectl logs)

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	ips     map[string]types.UID
}

// Run registers the node and runs its pods until ctx ends; then it kills every pod process
// (a harness teardown, not a drain: the API objects are left as they are).
func Run(ctx context.Context, cfg Config) error {
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return err
	}
	restCfg.QPS, restCfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	images, err := loadImageTable(cfg.ImagesFile)
	if err != nil {
		return err
	}
	if cfg.ImageDir == "" {
		cfg.ImageDir = filepath.Join(cfg.RootDir, "images")
	}
	if cfg.VolumeResync == 0 {
		cfg.VolumeResync = DefaultVolumeResync
	}
	store, err := newImageStore(cfg.ImageDir, cfg.Mirrors)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.RootDir, 0o755); err != nil {
		return err
	}
	k := &Kubelet{cfg: cfg, client: client, images: images, store: store, self: self,
		workers: map[types.UID]*podWorker{}, ips: map[string]types.UID{}}
	if k.port, err = k.serve(ctx); err != nil {
		return fmt.Errorf("kubelet server: %w", err)
	}
	if err := k.registerNode(ctx); err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	go k.heartbeat(ctx)

	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", metav1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.podChanged(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { k.podChanged(ctx, obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				k.podGone(p.UID)
			}
		},
	})
	log.Printf("kubelet %s: node registered, watching pods", cfg.NodeName)
	inf.Run(ctx.Done())

	k.mu.Lock()
	workers := make([]*podWorker, 0, len(k.workers))
	for _, w := range k.workers {
		workers = append(workers, w)
	}
	k.mu.Unlock()
	for _, w := range workers {
		w.killNow()
	}
	return nil
}

func (k *Kubelet) podChanged(ctx context.Context, p *corev1.Pod) {
	k.mu.Lock()
	w, ok := k.workers[p.UID]
	if !ok {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			// A finished pod from before a kubelet restart: nothing to run, but a deletion must
			// still be completed, which a real kubelet does too.
			k.mu.Unlock()
			if p.DeletionTimestamp != nil {
				k.finalDelete(ctx, p)
			}
			return
		}
		w = newPodWorker(k, p)
		k.workers[p.UID] = w
		go w.run(ctx)
	}
	k.mu.Unlock()
	w.update(p)
}

// podGone handles a pod object that disappeared (deleted with grace 0 by anyone): its
// processes are killed at once.
func (k *Kubelet) podGone(uid types.UID) {
	k.mu.Lock()
	w := k.workers[uid]
	k.mu.Unlock()
	if w != nil {
		w.killNow()
	}
}

func (k *Kubelet) forget(w *podWorker) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.workers, w.uid)
	if w.ip != "" {
		delete(k.ips, w.ip)
		switch {
		case !k.cfg.AddAddresses:
		case w.pod.Spec.HostNetwork:
			_ = exec.Command("ip", "addr", "del", w.ip+"/32", "dev", "lo").Run()
		default:
			teardownPodNetwork(w.ip)
		}
	}
}

// allocateIP gives a pod the address it had (when a restarted kubelet picks the pod up again and
// the address is free) or else the lowest free address of the node's /24, and inside the
// harness' network namespace its network: a namespace of its own (netns.go), or for a
// hostNetwork pod the address on the node's `lo`.
func (k *Kubelet) allocateIP(uid types.UID, previous string, hostNetwork bool) (string, error) {
	ip, err := k.reserveIP(uid, previous)
	if err != nil || !k.cfg.AddAddresses {
		return ip, err
	}
	if hostNetwork {
		if out, err := exec.Command("ip", "addr", "replace", ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
			err = fmt.Errorf("ip addr replace %s: %v: %s", ip, err, out)
		}
	} else {
		err = setupPodNetwork(ip, k.cfg.NodeIP)
	}
	if err != nil {
		k.mu.Lock()
		delete(k.ips, ip)
		k.mu.Unlock()
		return "", err
	}
	return ip, nil
}

// reserveIP picks the address allocateIP gives.
func (k *Kubelet) reserveIP(uid types.UID, previous string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	candidates := []string{}
	if strings.HasPrefix(previous, k.cfg.PodPrefix+".") {
		candidates = append(candidates, previous)
	}
	for i := 2; i < 255; i++ {
		candidates = append(candidates, fmt.Sprintf("%s.%d", k.cfg.PodPrefix, i))
	}
	for _, ip := range candidates {
		if _, used := k.ips[ip]; used {
			continue
		}
		k.ips[ip] = uid
		return ip, nil
	}
	return "", fmt.Errorf("no free pod address in %s.0/24", k.cfg.PodPrefix)
}

// netns is the network namespace file of a pod's containers, or "" when they share the
// kubelet's (hostNetwork pods, and a kubelet outside the harness' namespace).
func (w *podWorker) netns(ip string) string {
	if !w.k.cfg.AddAddresses || w.pod.Spec.HostNetwork || ip == "" {
		return ""
	}
	return netnsPath(ip)
}

// finalDelete removes a pod object whose processes are gone: grace 0 with a UID precondition,
// as the kubelet does once a pod has terminated.
func (k *Kubelet) finalDelete(ctx context.Context, p *corev1.Pod) {
	err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &p.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		log.Printf("delete pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

func nodeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("8"),
		corev1.ResourceMemory:           resource.MustParse("32Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
}

func (k *Kubelet) nodeStatus() corev1.NodeStatus {
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return corev1.NodeStatus{
		Capacity:    nodeCapacity(),
		Allocatable: nodeCapacity(),
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: k.cfg.NodeIP},
			{Type: corev1.NodeHostName, Address: k.cfg.NodeName},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(k.port)}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: k.cfg.KubeletVersion, OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "process://kaas-e2e",
		},
	}
}

func (k *Kubelet) registerNode(ctx context.Context) error {
	nodes := k.client.CoreV1().Nodes()
	_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: k.cfg.NodeName,
		Labels: map[string]string{
			"kubernetes.io/hostname": k.cfg.NodeName,
			"kubernetes.io/os":       "linux",
			"kubernetes.io/arch":     "amd64",
		},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return k.updateNodeStatus(ctx)
}

// updateNodeStatus patches the node's status, as the real kubelet does, rather than writing back
// a copy it read: the node lifecycle controller taints a node that was just registered (again),
// and NodeRestriction refuses a copy whose taints are stale ("not allowed to modify taints")
// before the apiserver would report the conflict.
func (k *Kubelet) updateNodeStatus(ctx context.Context) error {
	patch, err := json.Marshal(map[string]any{"status": k.nodeStatus()})
	if err != nil {
		return err
	}
	_, err = k.client.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// heartbeat renews the node Lease (what the node lifecycle controller watches) every 5s and
// rewrites the node status every 30s, until ctx ends. Killing the kubelet thus makes the node
// NotReady after the controller-manager's grace period, as on a crashed node.
func (k *Kubelet) heartbeat(ctx context.Context) {
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	lastStatus := time.Now()
	for {
		now := metav1.NewMicroTime(time.Now())
		lease, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			node, nerr := k.client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
			if nerr == nil {
				_, err = leases.Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.cfg.NodeName),
						LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
				}, metav1.CreateOptions{})
			}
		case err == nil:
			lease.Spec.RenewTime = &now
			_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err != nil && ctx.Err() == nil {
			log.Printf("node lease: %v", err)
		}
		if time.Since(lastStatus) > 30*time.Second {
			if err := k.updateNodeStatus(ctx); err != nil && ctx.Err() == nil {
				log.Printf("node status: %v", err)
			}
			lastStatus = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
