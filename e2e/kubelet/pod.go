package kubelet

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podWorker owns one pod (one UID) from first sight to the removal of its object.
type podWorker struct {
	k      *Kubelet
	uid    types.UID
	pod    *corev1.Pod // the object as first seen: spec and identity, which do not change
	dir    string      // scratch: volumes of this pod
	logDir string      // container logs, kept after the pod is gone

	mu          sync.Mutex
	latest      *corev1.Pod
	ip          string
	startTime   time.Time
	vols        map[string]string // volume name → host path
	volumesErr  string            // why the pod cannot start yet (waiting message)
	initialized bool
	initFailed  bool
	containers  []*container
	inits       []*container
	done        bool // every container has stopped for good

	// terminate is closed when the pod should stop; grace and noAPI say how.
	terminate     chan struct{}
	terminateOnce sync.Once
	grace         time.Duration
	noAPI         bool // killed because the object is gone or the kubelet stops: write nothing
	dirty         chan struct{}
	stopped       chan struct{} // closed when run returns
}

func newPodWorker(k *Kubelet, p *corev1.Pod) *podWorker {
	name := fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID)
	w := &podWorker{
		k: k, uid: p.UID, pod: p.DeepCopy(), latest: p,
		dir:       filepath.Join(k.cfg.RootDir, name),
		logDir:    filepath.Join(k.cfg.LogDir, name),
		terminate: make(chan struct{}),
		dirty:     make(chan struct{}, 1),
		stopped:   make(chan struct{}),
	}
	for i := range w.pod.Spec.InitContainers {
		w.inits = append(w.inits, newContainer(w, &w.pod.Spec.InitContainers[i], true))
	}
	for i := range w.pod.Spec.Containers {
		w.containers = append(w.containers, newContainer(w, &w.pod.Spec.Containers[i], false))
	}
	w.restoreCounts(p)
	return w
}

// restoreCounts carries restart counts over from the pod's status, so that a restarted kubelet
// (or node) counts the restart of containers that were running before it.
func (w *podWorker) restoreCounts(p *corev1.Pod) {
	for _, cs := range p.Status.ContainerStatuses {
		for _, c := range w.containers {
			if c.spec.Name == cs.Name {
				c.restartCount = cs.RestartCount
				if cs.State.Running != nil || cs.State.Terminated != nil {
					c.restartCount++
				}
			}
		}
	}
}

// update records the newest version of the pod object; a deletion timestamp starts graceful
// termination with the grace period the apiserver recorded. Any change may be someone else's
// write over our status, so the status is compared again (and written only if it differs).
func (w *podWorker) update(p *corev1.Pod) {
	w.mu.Lock()
	w.latest = p
	w.mu.Unlock()
	w.markDirty()
	if p.DeletionTimestamp != nil {
		grace := time.Duration(0)
		if p.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
		}
		w.stop(grace, false)
	}
}

func (w *podWorker) stop(grace time.Duration, noAPI bool) {
	w.terminateOnce.Do(func() {
		w.mu.Lock()
		w.grace, w.noAPI = grace, noAPI
		w.mu.Unlock()
		close(w.terminate)
	})
}

// killNow kills the pod's processes without a grace period and without touching the API, and
// waits until they are gone.
func (w *podWorker) killNow() {
	w.stop(0, true)
	<-w.stopped
}

func (w *podWorker) terminating() bool {
	select {
	case <-w.terminate:
		return true
	default:
		return false
	}
}

func (w *podWorker) markDirty() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

func (w *podWorker) logf(format string, args ...any) {
	log.Printf("pod %s/%s: %s", w.pod.Namespace, w.pod.Name, fmt.Sprintf(format, args...))
}

func (w *podWorker) run(parent context.Context) {
	defer close(w.stopped)
	defer w.k.forget(w)
	defer os.RemoveAll(w.dir)
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	statusDone := make(chan struct{})
	go func() { defer close(statusDone); w.statusLoop(ctx) }()

	if w.setup(ctx) {
		// configMap/secret volumes are kept current while containers run (volumes.go), and no
		// longer once they have stopped: the pod's directory is removed below.
		stopResync := w.startResync(ctx)
		if w.runInits(ctx) {
			w.runContainers(ctx)
		}
		stopResync()
	}
	w.mu.Lock()
	w.done = true
	noAPI := w.noAPI
	w.mu.Unlock()
	if noAPI || parent.Err() != nil {
		return
	}
	// Write the final status, then (if the pod is being deleted) remove the object, as the
	// kubelet does once every container has stopped.
	cancel()
	<-statusDone
	// NB: retried like every other status write: the loop's last write, cancelled just now,
	// may still land on the API server after this one's read, and the conflict would otherwise
	// leave a finished pod Running for good.
	for !w.writeStatus(parent) {
		if !sleepCtx(parent, 200*time.Millisecond) {
			return
		}
	}
	if w.terminating() {
		w.k.finalDelete(parent, w.latestPod())
		return
	}
	// A finished pod (restartPolicy Never/OnFailure) stays until someone deletes it.
	select {
	case <-w.terminate:
		if !w.noAPI {
			w.k.finalDelete(parent, w.latestPod())
		}
	case <-parent.Done():
	}
}

func (w *podWorker) latestPod() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

// setup gives the pod its address and volumes ("the sandbox"); false if the pod was stopped
// before that succeeded.
func (w *podWorker) setup(ctx context.Context) bool {
	if w.terminating() {
		return false
	}
	ip, err := w.k.allocateIP(w.uid, w.pod.Status.PodIP, w.pod.Spec.HostNetwork)
	if err != nil {
		w.logf("%v", err)
		<-w.terminate
		return false
	}
	w.mu.Lock()
	w.ip, w.startTime = ip, time.Now()
	w.mu.Unlock()
	w.markDirty()
	// Volumes may wait for a claim to bind or a configMap to appear: retry like the kubelet,
	// which reports each new reason as a FailedMount event on the pod.
	reported := ""
	for {
		vols, err := w.prepareVolumes(ctx)
		w.mu.Lock()
		w.vols = vols
		w.volumesErr = ""
		if err != nil {
			w.volumesErr = err.Error()
		}
		w.mu.Unlock()
		if err == nil {
			return true
		}
		w.logf("volumes: %v", err)
		if err.Error() != reported {
			reported = err.Error()
			w.warn(ctx, "FailedMount", reported)
		}
		w.markDirty()
		select {
		case <-w.terminate:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// runInits runs init containers one after another, each to successful completion.
func (w *podWorker) runInits(ctx context.Context) bool {
	for _, c := range w.inits {
		if !c.supervise(ctx) {
			w.mu.Lock()
			w.initFailed = !w.terminating()
			w.mu.Unlock()
			w.markDirty()
			return false
		}
	}
	w.mu.Lock()
	w.initialized = true
	w.mu.Unlock()
	w.markDirty()
	return true
}

func (w *podWorker) runContainers(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range w.containers {
		wg.Add(1)
		go func() { defer wg.Done(); c.supervise(ctx) }()
	}
	wg.Wait()
}

// warn records a Warning event on the pod, as the kubelet's event recorder does.
func (w *podWorker) warn(ctx context.Context, reason, message string) {
	now := metav1.Now()
	event := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: w.pod.Name + ".", Namespace: w.pod.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: w.pod.Namespace, Name: w.pod.Name, UID: w.uid,
		},
		Reason:         reason,
		Message:        message,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: w.k.cfg.NodeName},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if _, err := w.k.client.CoreV1().Events(w.pod.Namespace).Create(ctx, event, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		w.logf("event %s: %v", reason, err)
	}
}
