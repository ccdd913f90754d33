package scenarios

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/e2e/kaastest"
)

// BenchmarkFailover prints how long a partition is unavailable to a fresh producer after its
// leader is killed (kill -9; the kubelet restarts it) or paused (SIGSTOP until the controller
// moves the partition), each when the leader is another broker than the controller and when it
// is the controller (a new one must win the Lease first), or drained (kubectl delete pod:
// SIGTERM), and after a kill -9 of a leader whose active segment holds 1 GiB (the next leader's
// recovery scan). Each event runs KAAS_FAILOVER_RUNS times (default 10); KAAS_FAILOVER_EVENTS, a
// regular expression, runs only the events whose names it matches (e.g. SIGSTOP). The cluster
// is the scenarios' (fence 3 s, session 5 s, Lease 5 s), on kaas-nfsfs.
//
//	make bench-failover    (go test -run '^$' -bench Failover -benchtime 1x ./e2e/scenarios)
func BenchmarkFailover(b *testing.B) {
	runs := positiveEnv(b, "KAAS_FAILOVER_RUNS", 10)
	only, err := regexp.Compile(os.Getenv("KAAS_FAILOVER_EVENTS"))
	if err != nil {
		b.Fatalf("KAAS_FAILOVER_EVENTS: %v", err)
	}
	e := startCluster(b)
	e.Apply(kaastest.Topic("bench", 1, ""))
	// One partition per broker, so that one is (most often) led by the controller.
	e.Apply(kaastest.Topic("spread", 3, ""))
	e.Apply(kaastest.Topic("big", 1, `, config: {segment.bytes: "2147483647"}`))
	for _, topic := range []string{"bench", "spread", "big"} {
		e.WaitJSONPath(time.Minute, ns, "kafkatopic", topic, `.status.conditions[?(@.type=="Ready")].status`, "True")
	}
	waitWritable(b, e, "bench", 0, 2*time.Minute)

	pause := func(pod string) { e.Signal(ns, pod, "", syscall.SIGSTOP) }
	kill := func(pod string) { e.Signal(ns, pod, "", syscall.SIGKILL) }
	benchLeader := func() (string, int, string) { return e.benchLeader(b) }
	byController := func() (string, int, string) { return e.ledBy(b, true) }
	byAnother := func() (string, int, string) { return e.ledBy(b, false) }
	events := []struct {
		name string
		// victim picks the partition of interest and the pod of the broker to act on.
		victim func() (topic string, partition int, pod string)
		cause  func(pod string)
	}{
		{"kill -9 of a leader (not the controller)", byAnother, kill},
		{"kill -9 of the controller, leader of the partition", byController, kill},
		{"SIGSTOP of a leader (not the controller; moved after the session timeout)", byAnother, pause},
		{"SIGSTOP of the controller, leader of the partition (a new one wins the Lease, then moves it)", byController, pause},
		{"SIGTERM drain (kubectl delete pod)", benchLeader, func(pod string) {
			go func() { _, _ = e.Kubectl("-n", ns, "delete", "pod", pod, "--wait=false") }()
		}},
	}
	var report []string
	for range b.N {
		for _, ev := range events {
			if !only.MatchString(ev.name) {
				continue
			}
			var took, moved []time.Duration
			paused := strings.HasPrefix(ev.name, "SIGSTOP")
			for range runs {
				topic, partition, pod := ev.victim()
				// Each run meets a broker that has run longer than the kubelet's back-off reset,
				// so a killed one is restarted after the first back-off (1 s here), not after a
				// back-off doubled by the previous run's kill.
				e.waitRunningFor(pod, backoffReset)
				leader, epoch := e.leaderOf(b, topic, partition)
				start := time.Now()
				ev.cause(pod)
				if paused {
					// The server's part: until the assignment gives the partition to another
					// broker (a fresh client may then still dial the paused one first).
					e.waitMoved(2*time.Minute, topic, partition, leader, epoch)
					moved = append(moved, time.Since(start))
				}
				took = append(took, waitWritable(b, e, topic, int32(partition), 2*time.Minute).Sub(start))
				if paused {
					e.Signal(ns, pod, "", syscall.SIGCONT)
				}
				e.waitBrokersReady(3 * time.Minute)
				waitWritable(b, e, topic, int32(partition), 2*time.Minute)
			}
			if paused {
				report = append(report, summary("moved in the assignment after "+ev.name, moved))
			}
			report = append(report, summary("unavailable after "+ev.name, took))
		}

		// 1 GiB in the active segment, then kill -9 its leader: the next take-over scans it all.
		const bigEvent = "kill -9 of a leader with a 1 GiB active segment"
		if !only.MatchString(bigEvent) {
			continue
		}
		fill(b, e, "big", 1<<30)
		leader, _ := e.leaderOf(b, "big", 0)
		e.waitRunningFor(fmt.Sprintf("kc-%d", leader), backoffReset)
		start := time.Now()
		e.Signal(ns, fmt.Sprintf("kc-%d", leader), "", syscall.SIGKILL)
		report = append(report, summary("unavailable after "+bigEvent, []time.Duration{waitWritable(b, e, "big", 0, 5*time.Minute).Sub(start)}))
		e.waitBrokersReady(3 * time.Minute)
	}
	for _, line := range report {
		fmt.Fprintln(os.Stdout, line)
	}
}

// benchLeader is bench/0 and the pod of its leader.
func (e *seedsEnv) benchLeader(tb testing.TB) (string, int, string) {
	leader, _ := e.leaderOf(tb, "bench", 0)
	return "bench", 0, fmt.Sprintf("kc-%d", leader)
}

// ledBy is a partition led by the controller's broker (controller) or by another one, and the
// pod of its leader: one of spread's if it can, else bench/0 or big/0 (the balancer evens out
// the number of partitions each broker leads, not which topics they belong to); after a move
// it waits for the balancer to even leadership out again.
func (e *seedsEnv) ledBy(tb testing.TB, controller bool) (string, int, string) {
	tb.Helper()
	candidates := []struct {
		topic     string
		partition int
	}{{"spread", 0}, {"spread", 1}, {"spread", 2}, {"bench", 0}, {"big", 0}}
	var topic, pod string
	var partition int
	e.Eventually(time.Minute, fmt.Sprintf("a partition led by the controller: %v", controller), func() (bool, error) {
		holder := e.JSONPath(ns, "lease", "kc-controller", ".spec.holderIdentity")
		for _, c := range candidates {
			leader, _ := e.leaderOf(tb, c.topic, c.partition)
			if name := fmt.Sprintf("kc-%d", leader); (name == holder) == controller {
				topic, partition, pod = c.topic, c.partition, name
				return true, nil
			}
		}
		return false, nil
	})
	return topic, partition, pod
}

// backoffReset is how long a container must have run for the e2e kubelet to restart it after
// its first back-off again (e2e/kubelet/container.go), plus a second for the status' rounding.
const backoffReset = 11 * time.Second

// waitRunningFor waits until pod's container has been running for at least d.
func (e *seedsEnv) waitRunningFor(pod string, d time.Duration) {
	e.Eventually(2*time.Minute, pod+" running for "+d.String(), func() (bool, error) {
		started, err := time.Parse(time.RFC3339, e.JSONPath(ns, "pod", pod, ".status.containerStatuses[0].state.running.startedAt"))
		if err != nil {
			return false, err
		}
		if wait := d - time.Since(started); wait > 0 {
			time.Sleep(wait)
		}
		return true, nil
	})
}

// waitWritable starts a fresh producer every 200 ms, each trying for 3 s, until one gets a
// record to topic/partition acknowledged, and returns when the first one did. The attempts
// overlap so that the figure is when the cluster first accepts a fresh producer's write, not a
// client's own retry schedule: a franz-go client that met the dead leader waits MetadataMinAge
// (5 s) before it asks for metadata again, and an attempt begun just before the move would hold
// the next one back that long (kill -9 measured 5.06 s in every run that way).
func waitWritable(tb testing.TB, e *seedsEnv, topic string, partition int32, timeout time.Duration) time.Time {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithCancel(context.Background())
	var attempts sync.WaitGroup
	defer attempts.Wait()
	defer cancel()
	acked := make(chan time.Time, 1)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		attempts.Add(1)
		go func() {
			defer attempts.Done()
			attempt, stop := context.WithTimeout(ctx, 3*time.Second)
			defer stop()
			if produceOnce(attempt, tb, e.seeds(), topic, partition) == nil {
				select {
				case acked <- time.Now():
				default:
				}
			}
		}()
		select {
		case at := <-acked:
			return at
		case <-tick.C:
		}
	}
	tb.Fatalf("%s/%d not writable after %s", topic, partition, timeout)
	return time.Time{}
}

// fill writes bytes of 64 KiB records into topic/0.
func fill(tb testing.TB, e *seedsEnv, topic string, bytes int) {
	tb.Helper()
	cl := producer(tb, e.seeds(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	value := []byte(strings.Repeat("k", 64<<10))
	ctx := context.Background()
	for sent := 0; sent < bytes; sent += len(value) {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				tb.Errorf("filling %s: %v", topic, err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		tb.Fatal(err)
	}
}

// positiveEnv is the positive whole number in the environment variable name, or def when it
// is unset; anything else fails the benchmark.
func positiveEnv(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func summary(what string, took []time.Duration) string {
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	parts := make([]string, len(took))
	for i, d := range took {
		parts[i] = fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%-75s %s", what+":", strings.Join(parts, ", "))
}
