package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/e2e/kaastest"
)

// BenchmarkScaleCluster prints what many partitions cost on the scenarios' cluster (three
// broker pods on the e2e control plane, each node on its own kaas-nfsfs mount, the operator
// reconciling every topic), with the default timeouts (fence 6 s, session 10 s, Lease 15 s): KAAS_SCALE_TOPICS (2,000) topics of KAAS_SCALE_PARTITIONS (5)
// partitions created with CreateTopics, 100 a request (each becomes a KafkaTopic the operator
// provisions), until every partition is led; each broker's memory and descriptors then; the
// assignment's size and the controller's recompute time; Metadata for all topics; produce
// latency at KAAS_SCALE_RATE (10,000) msg/s spread over every partition for
// KAAS_SCALE_SECONDS (10); KAAS_SCALE_GROUPS (1,000) consumer groups committing offsets,
// KAAS_SCALE_PRODUCERS (1,000) idempotent producers and KAAS_SCALE_CONNECTIONS (10,000) idle
// client connections with what each costs a broker; and how long the other two brokers take
// to lead a third of the partitions after a broker pauses (SIGSTOP), and after a broker is
// killed (kill -9, restarted by the kubelet) until every partition is led again and until it
// leads its share again. The cluster has the defaults but for max.connections.per.ip, raised
// because every connection comes from this process's one address.
//
//	make bench-scale-cluster    (go test -run '^$' -bench ScaleCluster -benchtime 1x ./e2e/scenarios)
func BenchmarkScaleCluster(b *testing.B) {
	topics := positiveEnv(b, "KAAS_SCALE_TOPICS", 2000)
	partitions := positiveEnv(b, "KAAS_SCALE_PARTITIONS", 5)
	rate := positiveEnv(b, "KAAS_SCALE_RATE", 10000)
	seconds := positiveEnv(b, "KAAS_SCALE_SECONDS", 10)
	groups := positiveEnv(b, "KAAS_SCALE_GROUPS", 1000)
	producers := positiveEnv(b, "KAAS_SCALE_PRODUCERS", 1000)
	connections := positiveEnv(b, "KAAS_SCALE_CONNECTIONS", 10000)
	const brokers = 3
	total := topics * partitions
	var report []string
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		// Progress as it comes (go test shows a benchmark's log only at its end).
		fmt.Fprintln(os.Stderr, line)
		report = append(report, line)
	}
	say("bench-scale-cluster: %d broker pods on kaas-nfsfs, %d topics × %d partitions = %d", brokers, topics, partitions, total)
	// The held connections, and the clients' own, all from this process's address.
	perIP := connections/brokers + 1000
	e := startClusterWith(b, kaastest.Cluster(fmt.Sprintf("  config:\n    max.connections.per.ip: \"%d\"\n", perIP)+onePodANode))
	names := make([]string, topics)
	for t := range names {
		names[t] = fmt.Sprintf("scale-%05d", t)
	}
	for range b.N {
		empty := footprints(b, e, brokers)
		say("before any topic: %s", empty)

		start := time.Now()
		createTopics(b, e, names, int32(partitions))
		answered := time.Since(start)
		placed := waitAssignment(b, e, 10*time.Minute, func(a assignment) bool { return countPrefix(a, "scale-") == total })
		placedAt := time.Since(start)
		waitLed(b, e, brokers, total, 10*time.Minute)
		say("created %d partitions: CreateTopics answered in %.1f s, all placed in %.1f s, all led in %.1f s",
			total, answered.Seconds(), placedAt.Seconds(), time.Since(start).Seconds())
		idle := footprints(b, e, brokers)
		say("every partition led: %s; per led partition %s", idle, idle.perUnit(empty, total/brokers))
		if info, err := os.Stat(filepath.Join(e.export, "__cluster", "assignment.json")); err == nil {
			recomputes, seconds := controllerRecomputes(b, e, placed.ControllerID)
			say("assignment.json %.0f KiB (v%d); the controller's recomputes so far: %d, %.0f ms mean",
				float64(info.Size())/1024, placed.AssignmentVersion, int(recomputes), 1000*seconds/max(recomputes, 1))
		}

		say("Metadata for all topics, 10 requests: %s", metadataTimes(b, e, total))

		produced := produceAtRate(b, e, names, int32(partitions), rate, time.Duration(seconds)*time.Second)
		say("produce 1 KiB at %d msg/s over %d partitions (franz-go, acks=all): %s", rate, total, produced)
		written := footprints(b, e, brokers)
		say("after writing: %s", written)

		say("%d consumer groups: %s", groups, groupFigures(b, e, groups, names))
		say("%d idempotent producers (a franz-go client each, 20 at a time: metadata, InitProducerId, one record with acks=all): %s",
			producers, producerFigures(b, e, producers, names, int32(partitions)))
		unconnected := footprints(b, e, brokers)
		opened, holding := connectionFigures(b, e, connections, brokers)
		say("%d client connections: %s; holding them: %s; per connection %s", connections, opened, holding, holding.perUnit(unconnected, connections/brokers))

		// A broker pauses: the other two take its third over after the session timeout. Not the
		// controller, whose pause adds the wait for its Lease to expire before anything moves
		// (bench-failover measures that case). It leads its third first (a broker that fell out
		// under the load above gets its share back in steps).
		victim, others := pauseVictim(readAssignmentOrFail(b, e).ControllerID, brokers)
		pod := fmt.Sprintf("kc-%d", victim)
		waitLedBy(b, e, []int{victim}, total/brokers, 10*time.Minute)
		orphans := countLedBy(readAssignmentOrFail(b, e), victim)
		takeoversBefore := takeovers(b, e, others)
		start = time.Now()
		e.Signal(ns, pod, "", syscall.SIGSTOP)
		moved := waitAssignment(b, e, 5*time.Minute, func(a assignment) bool { return countLedBy(a, victim) == 0 })
		movedAt := time.Since(start)
		waitLedBy(b, e, others, total, 5*time.Minute)
		ledAt := time.Since(start)
		took := takeovers(b, e, others).minus(takeoversBefore)
		say("SIGSTOP of kc-%d (%d partitions; the controller: kc-%d): moved in the assignment after %.1f s, all led by the other two %.1f s after that (%d take-overs, %.0f ms each on average)",
			victim, orphans, moved.ControllerID, movedAt.Seconds(), (ledAt - movedAt).Seconds(), int(took.count), 1000*took.seconds/max(took.count, 1))
		say("while kc-%d is paused: %s", victim, footprints(b, e, brokers))
		// It resumes: the controller hands its share back in steps (--leader-moves-per-step).
		start = time.Now()
		e.Signal(ns, pod, "", syscall.SIGCONT)
		e.waitBrokersReady(5 * time.Minute)
		waitLedBy(b, e, []int{victim}, total/brokers, 10*time.Minute)
		waitLed(b, e, brokers, total, 10*time.Minute)
		say("SIGCONT of kc-%d: its share led by it again after %.1f s", victim, time.Since(start).Seconds())

		// A broker is killed: the others lead its partitions until the kubelet has restarted it,
		// and the controller hands its share back in steps, each once the last one is led.
		orphans = countLedBy(readAssignmentOrFail(b, e), victim)
		start = time.Now()
		e.Signal(ns, pod, "", syscall.SIGKILL)
		waitLed(b, e, brokers, total, 10*time.Minute)
		ledAgain := time.Since(start)
		waitLedBy(b, e, []int{victim}, total/brokers, 10*time.Minute)
		waitLed(b, e, brokers, total, 10*time.Minute)
		say("kill -9 of kc-%d (%d partitions), restarted by the kubelet: every partition led again after %.1f s, its share led by it again after %.1f s",
			victim, orphans, ledAgain.Seconds(), time.Since(start).Seconds())
	}
	for _, line := range report {
		fmt.Fprintln(os.Stdout, line)
	}
}

// pauseVictim is the broker to pause, the highest id that is not the controller, and the others.
func pauseVictim(controller, brokers int) (int, []int) {
	victim := brokers - 1
	if victim == controller {
		victim--
	}
	var others []int
	for id := range brokers {
		if id != victim {
			others = append(others, id)
		}
	}
	return victim, others
}

// createTopics creates the topics with CreateTopics, 100 a request, as a provisioning script
// would; every one must succeed.
func createTopics(b *testing.B, e *seedsEnv, names []string, partitions int32) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.RequestTimeoutOverhead(5*time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	for from := 0; from < len(names); from += 100 {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 300_000
		for _, name := range names[from:min(from+100, len(names))] {
			t := kmsg.NewCreateTopicsRequestTopic()
			t.Topic, t.NumPartitions, t.ReplicationFactor = name, partitions, -1
			req.Topics = append(req.Topics, t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		resp, err := req.RequestWith(ctx, cl)
		cancel()
		if err != nil {
			b.Fatalf("CreateTopics of %s..: %v", names[from], err)
		}
		for _, t := range resp.Topics {
			if t.ErrorCode != 0 {
				b.Fatalf("CreateTopics %s: error %d %v", t.Topic, t.ErrorCode, t.ErrorMessage)
			}
		}
	}
}

func readAssignmentOrFail(b *testing.B, e *seedsEnv) assignment {
	b.Helper()
	a, err := readAssignment(e.export)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// waitAssignment polls assignment.json on the export until ok holds for it.
func waitAssignment(b *testing.B, e *seedsEnv, timeout time.Duration, ok func(assignment) bool) assignment {
	b.Helper()
	var a assignment
	e.Eventually(timeout, "the assignment", func() (bool, error) {
		var err error
		a, err = readAssignment(e.export)
		return err == nil && ok(a), err
	})
	return a
}

func countPrefix(a assignment, prefix string) int {
	n := 0
	for key := range a.Partitions {
		if strings.HasPrefix(key, prefix) {
			n++
		}
	}
	return n
}

func countLedBy(a assignment, broker int) int {
	n := 0
	for _, p := range a.Partitions {
		if p.Leader == broker {
			n++
		}
	}
	return n
}

// waitLed waits until the first n brokers together lead at least want partitions by their
// own account (kaas_partitions_led: taken over, not only assigned) and none is fenced.
func waitLed(b *testing.B, e *seedsEnv, n, want int, timeout time.Duration) {
	b.Helper()
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	waitLedBy(b, e, ids, want, timeout)
}

func waitLedBy(b *testing.B, e *seedsEnv, ids []int, want int, timeout time.Duration) {
	b.Helper()
	e.Eventually(timeout, fmt.Sprintf("brokers %v to lead %d partitions", ids, want), func() (bool, error) {
		led := 0
		for _, id := range ids {
			m, err := brokerMetrics(e, id)
			if err != nil {
				return false, err
			}
			if m["kaas_fenced"] != 0 {
				return false, fmt.Errorf("kc-%d is fenced", id)
			}
			led += int(m["kaas_partitions_led"])
		}
		return led >= want, fmt.Errorf("they lead %d", led)
	})
}

// brokerMetrics is each family of broker id's /metrics, summed over its labels.
func brokerMetrics(e *seedsEnv, id int) (map[string]float64, error) {
	return fetchMetrics(e, id, parseMetrics)
}

// fetchMetrics reads broker id's /metrics with parse.
func fetchMetrics[T any](e *seedsEnv, id int, parse func(io.Reader) (T, error)) (T, error) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + e.PodAddr(ns, fmt.Sprintf("kc-%d", id), 9095) + "/metrics")
	if err != nil {
		var none T
		return none, err
	}
	defer resp.Body.Close()
	return parse(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// Label values may hold spaces; the value is the last field.
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 {
			return nil, fmt.Errorf("unreadable line %q", line)
		}
		sample, value := line[:cut], line[cut+1:]
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("unreadable line %q", line)
		}
		name, _, _ := strings.Cut(sample, "{")
		out[name] += v
	}
	return out, lines.Err()
}

// takeoverTotals is how many partition take-overs brokers ran and how long they took in all.
type takeoverTotals struct{ count, seconds float64 }

func (t takeoverTotals) minus(before takeoverTotals) takeoverTotals {
	return takeoverTotals{t.count - before.count, t.seconds - before.seconds}
}

// takeovers sums the partition take-overs of brokers ids so far.
func takeovers(b *testing.B, e *seedsEnv, ids []int) takeoverTotals {
	b.Helper()
	var t takeoverTotals
	for _, id := range ids {
		m, err := brokerMetrics(e, id)
		if err != nil {
			b.Fatal(err)
		}
		t.count += m["kaas_partition_takeover_seconds_count"]
		t.seconds += m["kaas_partition_takeover_seconds_sum"]
	}
	return t
}

// controllerRecomputes is the count and total seconds of the controller's recomputes.
func controllerRecomputes(b *testing.B, e *seedsEnv, controller int) (float64, float64) {
	b.Helper()
	m, err := brokerMetrics(e, controller)
	if err != nil {
		b.Fatal(err)
	}
	return m["kaas_controller_recompute_seconds_count"], m["kaas_controller_recompute_seconds_sum"]
}

// footprint is what each broker pod holds: resident memory (its process's VmRSS) and open
// descriptors.
type footprint struct{ rss, fds []float64 }

func footprints(b *testing.B, e *seedsEnv, n int) footprint {
	b.Helper()
	var f footprint
	for id := range n {
		pod := fmt.Sprintf("kc-%d", id)
		pid, err := e.PodPID(ns, pod, "")
		if err != nil {
			b.Fatal(err)
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			b.Fatal(err)
		}
		var kib float64
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kib, _ = strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			}
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			b.Fatal(err)
		}
		f.rss = append(f.rss, kib*1024)
		f.fds = append(f.fds, float64(len(fds)))
	}
	return f
}

func (f footprint) String() string {
	var each []string
	for i := range f.rss {
		each = append(each, fmt.Sprintf("kc-%d %.1f MiB, %.0f fds", i, f.rss[i]/(1<<20), f.fds[i]))
	}
	return strings.Join(each, "; ")
}

// perUnit is the mean growth per broker since before, divided by units each.
func (f footprint) perUnit(before footprint, units int) string {
	var rss, fds float64
	for i := range f.rss {
		rss += f.rss[i] - before.rss[i]
		fds += f.fds[i] - before.fds[i]
	}
	n := float64(len(f.rss) * max(units, 1))
	return fmt.Sprintf("%+.1f KiB and %+.2f descriptors", rss/n/1024, fds/n)
}

// metadataTimes times 10 Metadata requests for all topics from one client (after a first that
// warms the connection), each checked to name every partition.
func metadataTimes(b *testing.B, e *seedsEnv, total int) string {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var took []time.Duration
	for i := range 11 {
		req := kmsg.NewPtrMetadataRequest()
		start := time.Now()
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			b.Fatal(err)
		}
		named := 0
		for _, t := range resp.Topics {
			if t.Topic != nil && strings.HasPrefix(*t.Topic, "scale-") {
				named += len(t.Partitions)
			}
		}
		if named != total {
			b.Fatalf("Metadata named %d partitions, not %d", named, total)
		}
		if i > 0 {
			took = append(took, time.Since(start))
		}
	}
	slices.Sort(took)
	return fmt.Sprintf("p50 %.1f ms, max %.1f ms", quantile(took, 0.5), quantile(took, 1))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile is the p quantile (1: the largest) of sorted durations, in milliseconds.
func quantile(sorted []time.Duration, p float64) float64 {
	return ms(sorted[min(len(sorted)-1, int(p*float64(len(sorted))))])
}

// produceAtRate sends 1 KiB records at rate msg/s, round robin over every partition of the
// topics, for d; a record's latency counts from its due time to its acknowledgement. Every
// record must be acknowledged.
func produceAtRate(b *testing.B, e *seedsEnv, names []string, partitions int32, rate int, d time.Duration) string {
	b.Helper()
	cl := producer(b, e.seeds(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(1<<20))
	defer cl.Close()
	value := []byte(strings.Repeat("v", 1024))
	var mu sync.Mutex
	var latencies []time.Duration
	var failed error
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	for now := range tick.C {
		if now.Sub(start) >= d {
			break
		}
		for due := int(float64(rate) * now.Sub(start).Seconds()); sent < due; sent++ {
			at := start.Add(time.Duration(float64(sent+1) / float64(rate) * float64(time.Second)))
			n := sent % (len(names) * int(partitions))
			rec := &kgo.Record{Topic: names[n%len(names)], Partition: int32(n/len(names)) % partitions, Value: value}
			cl.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
				done := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = err
					return
				}
				latencies = append(latencies, done.Sub(at))
			})
		}
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		b.Fatalf("producing: %v", failed)
	}
	if len(latencies) != sent {
		b.Fatalf("%d of %d records acknowledged", len(latencies), sent)
	}
	slices.Sort(latencies)
	at := func(p float64) float64 { return quantile(latencies, p) }
	return fmt.Sprintf("%d records, p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, max %.1f ms", sent, at(0.5), at(0.99), at(0.999), at(1))
}
