package kubelet

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// statusResync is how often the status on the API server is compared with the kubelet's, as
// the real kubelet's status manager does: someone else (the node lifecycle controller marking a
// lost node's pods NotReady) may have overwritten it after our last write.
const statusResync = 10 * time.Second

// statusLoop writes the pod's status whenever something changed here or on the API server,
// retrying failed writes.
func (w *podWorker) statusLoop(ctx context.Context) {
	resync := time.NewTicker(statusResync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.dirty:
		case <-resync.C:
		}
		for !w.writeStatus(ctx) {
			if !sleepCtx(ctx, 200*time.Millisecond) {
				return
			}
		}
	}
}

// writeStatus puts the kubelet-owned part of the status on the current object (conditions that
// others own, such as PodScheduled and readiness gates, are kept). False means retry.
func (w *podWorker) writeStatus(ctx context.Context) bool {
	w.mu.Lock()
	noAPI := w.noAPI
	w.mu.Unlock()
	if noAPI {
		return true
	}
	pods := w.k.client.CoreV1().Pods(w.pod.Namespace)
	pod, err := pods.Get(ctx, w.pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && pod.UID != w.uid) {
		return true
	}
	if err != nil {
		return ctx.Err() != nil
	}
	before := pod.Status.DeepCopy()
	w.buildStatus(&pod.Status, pod.Spec.ReadinessGates)
	if sameOnServer(before, &pod.Status) {
		return true
	}
	_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		if !apierrors.IsConflict(err) {
			w.logf("update status: %v", err)
		}
		return false
	}
	return true
}

// sameOnServer says whether writing next over current would change nothing: times go through
// JSON (whole seconds) as the server stores them, or every comparison would differ.
func sameOnServer(current, next *corev1.PodStatus) bool {
	b, err := json.Marshal(next)
	if err != nil {
		return false
	}
	var stored corev1.PodStatus
	if json.Unmarshal(b, &stored) != nil {
		return false
	}
	return apiequality.Semantic.DeepEqual(current, &stored)
}

func (w *podWorker) buildStatus(st *corev1.PodStatus, gates []corev1.PodReadinessGate) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ip != "" {
		st.PodIP, st.PodIPs = w.ip, []corev1.PodIP{{IP: w.ip}}
		st.HostIP, st.HostIPs = w.k.cfg.NodeIP, []corev1.HostIP{{IP: w.k.cfg.NodeIP}}
		if st.StartTime == nil {
			st.StartTime = ptr.To(metav1.NewTime(w.startTime))
		}
	}
	st.InitContainerStatuses = containerStatuses(w.inits)
	st.ContainerStatuses = containerStatuses(w.containers)

	allReady, anyStarted, allDone, allSucceeded := true, false, true, true
	for _, c := range w.containers {
		allReady = allReady && c.ready && c.running
		anyStarted = anyStarted || c.running || c.terminated != nil || c.lastTerm != nil
		allDone = allDone && c.terminated != nil
		allSucceeded = allSucceeded && c.terminated != nil && c.terminated.ExitCode == 0
	}
	switch {
	case w.initFailed:
		st.Phase = corev1.PodFailed
	case w.done && allDone && allSucceeded:
		st.Phase = corev1.PodSucceeded
	case w.done && allDone:
		st.Phase = corev1.PodFailed
	case w.initialized && anyStarted:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	gatesOK := true
	for _, g := range gates {
		ok := false
		for _, cond := range st.Conditions {
			if cond.Type == g.ConditionType && cond.Status == corev1.ConditionTrue {
				ok = true
			}
		}
		gatesOK = gatesOK && ok
	}
	setCondition(st, corev1.PodReadyToStartContainers, w.ip != "")
	setCondition(st, corev1.PodInitialized, w.initialized)
	setCondition(st, corev1.ContainersReady, allReady && w.initialized)
	setCondition(st, corev1.PodReady, allReady && w.initialized && gatesOK)
}

func containerStatuses(cs []*container) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(cs))
	for _, c := range cs {
		s := corev1.ContainerStatus{
			Name:         c.spec.Name,
			Image:        c.spec.Image,
			ImageID:      "process://" + c.bin,
			RestartCount: c.restartCount,
			Ready:        c.ready && c.running,
			Started:      ptr.To(c.running && c.started),
		}
		if c.image != nil {
			s.ImageID = c.image.ID
		}
		switch {
		case c.running:
			s.ContainerID = containerID(c.pid)
			s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
		case c.terminated != nil:
			s.ContainerID = c.terminated.ContainerID
			s.State.Terminated = c.terminated
		case c.waiting != nil:
			s.State.Waiting = c.waiting
		default:
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		if c.lastTerm != nil && (c.running || c.waiting != nil) {
			s.LastTerminationState.Terminated = c.lastTerm
		}
		out = append(out, s)
	}
	return out
}

// setCondition sets a condition, keeping its transition time when the status is unchanged.
func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, ok bool) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status != status {
				st.Conditions[i].Status = status
				st.Conditions[i].LastTransitionTime = metav1.Now()
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()})
}
