package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe runs the container's startup, then readiness and liveness probes until ctx ends (the
// process exited or the pod stops). Without a readiness probe a started container is ready.
func (c *container) probe(ctx context.Context) {
	w := c.w
	w.mu.Lock()
	pid := c.pid
	w.mu.Unlock()
	// Probe only once pod-init has exec'ed the program: before that the pod's root and mounts
	// are still being built, and an exec probe would see a half-made root.
	for i := 0; i < 250; i++ {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || exe != w.k.self || !sleepCtx(ctx, 20*time.Millisecond) {
			break
		}
	}
	if p := c.spec.StartupProbe; p != nil {
		if !c.probeLoop(ctx, "startup", p, func(ok bool) bool { return !ok }) {
			return
		}
		w.mu.Lock()
		c.started = true
		w.mu.Unlock()
		w.markDirty()
	}
	if c.spec.ReadinessProbe == nil {
		w.mu.Lock()
		c.ready = true
		w.mu.Unlock()
		w.markDirty()
	} else {
		go c.probeLoop(ctx, "readiness", c.spec.ReadinessProbe, func(ok bool) bool {
			w.mu.Lock()
			changed := c.ready != ok
			c.ready = ok
			w.mu.Unlock()
			if changed {
				w.markDirty()
			}
			return true
		})
	}
	if p := c.spec.LivenessProbe; p != nil {
		c.probeLoop(ctx, "liveness", p, func(ok bool) bool { return ok })
	}
}

// probeLoop probes every period after the initial delay and calls result with each settled
// result (after successThreshold successes or failureThreshold failures in a row); it stops
// when result returns false. A startup or liveness probe that settles on failure kills the
// container, so that supervise restarts it per restartPolicy. It returns whether the loop ended
// on a settled success.
func (c *container) probeLoop(ctx context.Context, kind string, p *corev1.Probe, result func(ok bool) bool) bool {
	period := secs(p.PeriodSeconds, 10)
	successT, failureT := int(max(p.SuccessThreshold, 1)), 3
	if p.FailureThreshold > 0 {
		failureT = int(p.FailureThreshold)
	}
	if !sleepCtx(ctx, secs(p.InitialDelaySeconds, 0)) {
		return false
	}
	successes, failures := 0, 0
	for {
		ok, msg := c.runProbe(ctx, p)
		if ctx.Err() != nil {
			return false
		}
		if ok {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
			c.w.logf("container %s: %s probe failed: %s", c.spec.Name, kind, msg)
		}
		settled := (ok && successes >= successT) || (!ok && failures >= failureT)
		if settled {
			if !ok && kind != "readiness" {
				c.w.logf("container %s: %s probe failed %d times, killing", c.spec.Name, kind, failures)
				go c.kill(c.w.podGrace(), c.currentExited())
				return false
			}
			if !result(ok) {
				return ok
			}
		}
		if !sleepCtx(ctx, period) {
			return false
		}
	}
}

func (c *container) currentExited() <-chan struct{} {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return c.exited
}

// podGrace is the pod's terminationGracePeriodSeconds (default 30s).
func (w *podWorker) podGrace() time.Duration {
	if g := w.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// runProbe performs one probe: httpGet and tcpSocket against the pod's address, exec inside the
// container's mount namespace (via nsenter) with the container's environment.
func (c *container) runProbe(ctx context.Context, p *corev1.Probe) (bool, string) {
	timeout := secs(p.TimeoutSeconds, 1)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w := c.w
	w.mu.Lock()
	ip, pid := w.ip, c.pid
	w.mu.Unlock()
	switch {
	case p.HTTPGet != nil:
		g := p.HTTPGet
		host := g.Host
		if host == "" {
			host = ip
		}
		port, err := c.resolvePort(g.Port)
		if err != nil {
			return false, err.Error()
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s://%s%s", scheme,
			net.JoinHostPort(host, strconv.Itoa(port)), g.Path), nil)
		if err != nil {
			return false, err.Error()
		}
		for _, h := range g.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		req.Header.Set("User-Agent", "kube-probe/process-kubelet")
		// Like the kubelet: no certificate verification and no keep-alive.
		client := &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 400 {
			return true, ""
		}
		return false, "HTTP " + resp.Status
	case p.TCPSocket != nil:
		port, err := c.resolvePort(p.TCPSocket.Port)
		if err != nil {
			return false, err.Error()
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = ip
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	case p.Exec != nil:
		if len(p.Exec.Command) == 0 {
			return false, "empty exec command"
		}
		env, err := w.containerEnv(ctx, c.spec, c.baseEnv())
		if err != nil {
			return false, err.Error()
		}
		cmdline := append([]string{"-t", strconv.Itoa(pid), "-m", "-u", "-r", "-w", "--", c.execBinary(p.Exec.Command[0])}, p.Exec.Command[1:]...)
		cmd := exec.CommandContext(ctx, "nsenter", cmdline...)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		return true, ""
	}
	return false, "probe type not supported by the process kubelet"
}

// execBinary maps the first word of an exec probe (a path inside the image) to the host: an
// existing host path as is, otherwise the image's binary (an image is one binary here).
func (c *container) execBinary(word string) string {
	c.w.mu.Lock()
	pulled := c.image != nil
	c.w.mu.Unlock()
	if pulled {
		return word // nsenter -r runs it inside the container's own root
	}
	if !strings.Contains(word, "/") {
		if p, err := exec.LookPath(word); err == nil {
			return p
		}
	} else if _, err := os.Stat(word); err == nil {
		return word
	}
	c.w.mu.Lock()
	bin := c.bin
	c.w.mu.Unlock()
	if bin != "" && bin != HostImage {
		return bin
	}
	return word
}

func (c *container) resolvePort(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("no container port named %q", p.StrVal)
}

func secs(n int32, def int) time.Duration {
	if n <= 0 {
		return time.Duration(def) * time.Second
	}
	return time.Duration(n) * time.Second
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
