package scenarios

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/e2e/kaastest"
)

// BenchmarkFailover prints how long a partition is unavailable to a producer after its leader
// is killed (kill -9; the kubelet restarts it), paused (SIGSTOP until the controller moves the
// partition after the session timeout), paused while it is also the controller (a new one must
// win the Lease first), or drained (kubectl delete pod: SIGTERM), and after a kill -9 of a
// leader whose active segment holds 1 GiB (the new leader's recovery scan). Each event runs
// KAAS_FAILOVER_RUNS times (default 10). The cluster is the scenarios' (fence 3 s, session
// 5 s, Lease 5 s), on kaas-nfsfs.
//
//	make bench-failover    (go test -run '^$' -bench Failover -benchtime 1x ./e2e/scenarios)
func BenchmarkFailover(b *testing.B) {
	runs := positiveEnv(b, "KAAS_FAILOVER_RUNS", 10)
	e := startCluster(b)
	e.Apply(kaastest.Topic("bench", 1, ""))
	// One partition per broker, so that one is led by the controller.
	e.Apply(kaastest.Topic("spread", 3, ""))
	e.Apply(kaastest.Topic("big", 1, `, config: {segment.bytes: "2147483647"}`))
	for _, topic := range []string{"bench", "spread", "big"} {
		e.WaitJSONPath(time.Minute, ns, "kafkatopic", topic, `.status.conditions[?(@.type=="Ready")].status`, "True")
	}
	waitWritable(b, e, "bench", 0, 2*time.Minute)

	pause := func(pod string) { e.Signal(ns, pod, "", syscall.SIGSTOP) }
	benchLeader := func() (string, int, string) { return e.benchLeader(b) }
	events := []struct {
		name string
		// victim picks the partition of interest and the pod of the broker to act on.
		victim func() (topic string, partition int, pod string)
		cause  func(pod string)
	}{
		{"kill -9 (restarted by the kubelet)", benchLeader, func(pod string) { e.Signal(ns, pod, "", syscall.SIGKILL) }},
		{"SIGSTOP (moved after the session timeout)", benchLeader, pause},
		{"SIGSTOP of the controller (a new one wins the Lease, then moves it)", func() (string, int, string) { return e.ledByController(b) }, pause},
		{"SIGTERM drain (kubectl delete pod)", benchLeader, func(pod string) {
			go func() { _, _ = e.Kubectl("-n", ns, "delete", "pod", pod, "--wait=false") }()
		}},
	}
	var report []string
	for range b.N {
		for _, ev := range events {
			var took, moved []time.Duration
			paused := strings.HasPrefix(ev.name, "SIGSTOP")
			for range runs {
				topic, partition, pod := ev.victim()
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
		fill(b, e, "big", 1<<30)
		leader, _ := e.leaderOf(b, "big", 0)
		start := time.Now()
		e.Signal(ns, fmt.Sprintf("kc-%d", leader), "", syscall.SIGKILL)
		report = append(report, summary("unavailable after kill -9 of a leader with a 1 GiB active segment", []time.Duration{waitWritable(b, e, "big", 0, 5*time.Minute).Sub(start)}))
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

// ledByController is a partition of spread that the controller's broker leads, and its pod;
// after a move it waits for the balancer to even leadership out again.
func (e *seedsEnv) ledByController(tb testing.TB) (string, int, string) {
	tb.Helper()
	var partition int
	var holder string
	e.Eventually(time.Minute, "the controller to lead a partition of spread", func() (bool, error) {
		holder = e.JSONPath(ns, "lease", "kc-controller", ".spec.holderIdentity")
		for p := range 3 {
			if leader, _ := e.leaderOf(tb, "spread", p); fmt.Sprintf("kc-%d", leader) == holder {
				partition = p
				return true, nil
			}
		}
		return false, nil
	})
	return "spread", partition, holder
}

// waitWritable produces to topic/partition until a record is acknowledged and returns when it was.
func waitWritable(tb testing.TB, e *seedsEnv, topic string, partition int32, timeout time.Duration) time.Time {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		attempt, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := produceOnce(attempt, tb, e.seeds(), topic, partition)
		cancel()
		if err == nil {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
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
