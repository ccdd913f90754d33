package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/e2e/kaastest"
)

// BenchmarkScaleOut prints how aggregate produce throughput grows as the load spreads from one
// broker to two and three, and what each broker asks of the shared volume meanwhile: the bytes
// it made durable and the syncs it issued per second (its kaas_fsync_bytes and
// kaas_fsync_seconds, scraped before and after). The topic has two partitions per broker;
// step n produces flat out (acks=all, idempotent, 1 KiB records, uncompressed) to the
// partitions the first n brokers lead, for KAAS_SCALEOUT_SECONDS (default 20) each; all three
// brokers run throughout. Every broker, the kaas-nfsfs server and the load generator share one
// machine, so the figures give the shape, not what n machines would do.
//
//	make bench-scaleout    (go test -run '^$' -bench ScaleOut -benchtime 1x ./e2e/scenarios)
func BenchmarkScaleOut(b *testing.B) {
	seconds := positiveEnv(b, "KAAS_SCALEOUT_SECONDS", 20)
	const brokers, topic = 3, "scaleout"
	e := startCluster(b)
	e.Apply(kaastest.Topic(topic, 2*brokers, ""))
	e.WaitJSONPath(time.Minute, ns, "kafkatopic", topic, `.status.conditions[?(@.type=="Ready")].status`, "True")
	for p := range 2 * brokers {
		waitWritable(b, e, topic, int32(p), 2*time.Minute)
	}
	led := map[int][]int32{}
	for p := range 2 * brokers {
		leader, _ := e.leaderOf(b, topic, p)
		led[leader] = append(led[leader], int32(p))
	}

	report := []string{fmt.Sprintf("%-9s %-11s %-8s %-12s %s", "brokers", "partitions", "MB/s", "records/s", "per broker: durable MB/s, syncs/s (segment syncs/s)")}
	for range b.N {
		for n := 1; n <= brokers; n++ {
			var partitions []int32
			for id := range n {
				partitions = append(partitions, led[id]...)
			}
			before := scrapeFsyncs(b, e, brokers)
			start := time.Now()
			acked, records := produceFlatOut(b, e, topic, partitions, time.Duration(seconds)*time.Second)
			took := time.Since(start).Seconds()
			after := scrapeFsyncs(b, e, brokers)
			var each []string
			for id := range brokers {
				d := after[id].minus(before[id])
				each = append(each, fmt.Sprintf("kc-%d %.1f, %.0f (%.0f)", id, d.bytes/took/1e6, d.syncs/took, d.segmentSyncs/took))
			}
			report = append(report, fmt.Sprintf("%-9d %-11d %-8.1f %-12.0f %s", n, len(partitions), float64(acked)/took/1e6, float64(records)/took, strings.Join(each, "; ")))
		}
	}
	for _, line := range report {
		fmt.Fprintln(os.Stdout, line)
	}
}

// produceFlatOut keeps 1 KiB records flowing to partitions (round robin) for d, then waits for
// every one to be acknowledged; it returns the bytes and records acknowledged. A failed
// record fails the benchmark: an error is not throughput.
func produceFlatOut(b *testing.B, e *seedsEnv, topic string, partitions []int32, d time.Duration) (int64, int64) {
	b.Helper()
	// Uncompressed (franz-go compresses with snappy by default): every acknowledged byte is a
	// byte on the volume, as the per-broker figures assume.
	cl := producer(b, e.seeds(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20),
		kgo.MaxBufferedRecords(64<<10), kgo.ProducerBatchCompression(kgo.NoCompression()))
	defer cl.Close()
	value := []byte(strings.Repeat("v", 1024))
	var bytes, records atomic.Int64
	var failed atomic.Value
	ctx := context.Background()
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: partitions[i%len(partitions)], Value: value}, func(r *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
				return
			}
			bytes.Add(int64(len(r.Value)))
			records.Add(1)
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if err, ok := failed.Load().(error); ok {
		b.Fatalf("producing to %s: %v", topic, err)
	}
	return bytes.Load(), records.Load()
}

// fsyncs is what one broker's /metrics says it synced so far.
type fsyncs struct{ bytes, syncs, segmentSyncs float64 }

func (f fsyncs) minus(o fsyncs) fsyncs {
	return fsyncs{f.bytes - o.bytes, f.syncs - o.syncs, f.segmentSyncs - o.segmentSyncs}
}

// scrapeFsyncs reads kaas_fsync_bytes_sum and kaas_fsync_seconds_count of brokers kc-0.. from
// their metrics port, summed over the files they label.
func scrapeFsyncs(b *testing.B, e *seedsEnv, brokers int) []fsyncs {
	b.Helper()
	out := make([]fsyncs, brokers)
	for id := range brokers {
		var err error
		if out[id], err = fetchMetrics(e, id, parseFsyncs); err != nil {
			b.Fatalf("kc-%d /metrics: %v", id, err)
		}
	}
	return out
}

func parseFsyncs(r io.Reader) (fsyncs, error) {
	var f fsyncs
	var sawBytes, sawSyncs bool
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "kaas_fsync_bytes_sum" && name != "kaas_fsync_seconds_count") {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if !ok || err != nil {
			return f, fmt.Errorf("unreadable line %q", line)
		}
		if name == "kaas_fsync_bytes_sum" {
			f.bytes += v
			sawBytes = true
			continue
		}
		f.syncs += v
		sawSyncs = true
		if strings.Contains(labels, `file="segment"`) {
			f.segmentSyncs += v
		}
	}
	if err := lines.Err(); err != nil {
		return f, err
	}
	if !sawBytes || !sawSyncs {
		return f, fmt.Errorf("no kaas_fsync_bytes_sum or no kaas_fsync_seconds_count")
	}
	return f, nil
}
