package scenarios

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/e2e/kaastest"
)

// BenchmarkFailover prints how long a partition is unavailable to a producer after its leader
// is killed (kill -9; the kubelet restarts it), paused (SIGSTOP until the controller moves the
// partition after the session timeout), or drained (kubectl delete pod: SIGTERM), and after a
// kill -9 of a leader whose active segment holds 1 GiB (the new leader's recovery scan). The
// cluster is the scenarios' (fence 3 s, session 5 s, Lease 5 s), on kaas-nfsfs.
//
//	make bench-failover    (go test -run '^$' -bench Failover -benchtime 1x ./e2e/scenarios)
func BenchmarkFailover(b *testing.B) {
	e := startCluster(b)
	e.Apply(kaastest.Topic("bench", 1, ""))
	e.Apply(kaastest.Topic("big", 1, `, config: {segment.bytes: "2147483647"}`))
	for _, topic := range []string{"bench", "big"} {
		e.WaitJSONPath(time.Minute, ns, "kafkatopic", topic, `.status.conditions[?(@.type=="Ready")].status`, "True")
	}
	waitWritable(b, e, "bench", 2*time.Minute)

	events := []struct {
		name  string
		cause func(pod string)
	}{
		{"kill -9 (restarted by the kubelet)", func(pod string) { e.Signal(ns, pod, "", syscall.SIGKILL) }},
		{"SIGSTOP (moved after the session timeout)", func(pod string) { e.Signal(ns, pod, "", syscall.SIGSTOP) }},
		{"SIGTERM drain (kubectl delete pod)", func(pod string) {
			go func() { _, _ = e.Kubectl("-n", ns, "delete", "pod", pod, "--wait=false") }()
		}},
	}
	var report []string
	for range b.N {
		for _, ev := range events {
			var took []time.Duration
			for range 3 {
				leader, _ := e.leaderOf(b, "bench", 0)
				pod := fmt.Sprintf("kc-%d", leader)
				start := time.Now()
				ev.cause(pod)
				took = append(took, waitWritable(b, e, "bench", 2*time.Minute).Sub(start))
				if strings.HasPrefix(ev.name, "SIGSTOP") {
					e.Signal(ns, pod, "", syscall.SIGCONT)
				}
				e.waitBrokersReady(3 * time.Minute)
				waitWritable(b, e, "bench", 2*time.Minute)
			}
			report = append(report, summary("unavailable after "+ev.name, took))
		}

		// 1 GiB in the active segment, then kill -9 its leader: the next take-over scans it all.
		fill(b, e, "big", 1<<30)
		leader, _ := e.leaderOf(b, "big", 0)
		start := time.Now()
		e.Signal(ns, fmt.Sprintf("kc-%d", leader), "", syscall.SIGKILL)
		report = append(report, summary("unavailable after kill -9 of a leader with a 1 GiB active segment", []time.Duration{waitWritable(b, e, "big", 5*time.Minute).Sub(start)}))
		e.waitBrokersReady(3 * time.Minute)
	}
	for _, line := range report {
		fmt.Fprintln(os.Stdout, line)
	}
}

// waitWritable produces to topic/0 until a record is acknowledged and returns when it was.
func waitWritable(tb testing.TB, e *seedsEnv, topic string, timeout time.Duration) time.Time {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		attempt, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := produceOnce(attempt, tb, e.seeds(), topic, 0)
		cancel()
		if err == nil {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("%s/0 not writable after %s", topic, timeout)
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

func summary(what string, took []time.Duration) string {
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	parts := make([]string, len(took))
	for i, d := range took {
		parts[i] = fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%-75s %s", what+":", strings.Join(parts, ", "))
}
