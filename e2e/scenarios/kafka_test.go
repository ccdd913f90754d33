package scenarios

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ack is where the cluster said a record landed.
type ack struct {
	partition int32
	offset    int64
}

// ledger is what one producer sent and what the cluster acknowledged. Values are
// "<prefix>-<seq:08d>", so a read-back record names its producer and its send order.
type ledger struct {
	topic  string
	prefix string
	mu     sync.Mutex
	sent   int
	acked  map[string]ack
	failed []string // errors the client gave up on (after its own retries)
	pad    int      // bytes of padding after the sequence number
}

func newLedger(topic, prefix string) *ledger {
	return &ledger{topic: topic, prefix: prefix, acked: map[string]ack{}}
}

// producer is an idempotent franz-go producer with acks=all, retrying retriable errors itself
// (NOT_LEADER_OR_FOLLOWER, ...) for up to a minute per record, as an application would.
func producer(t testing.TB, seeds []string, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Every partition gets records, so every partition's failover is exercised.
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(90 * time.Second),
		kgo.ProducerLinger(2 * time.Millisecond),
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// send produces n records asynchronously and records the outcome of each.
func (l *ledger) send(ctx context.Context, cl *kgo.Client, n int) {
	for range n {
		l.mu.Lock()
		value := fmt.Sprintf("%s-%08d", l.prefix, l.sent)
		if l.pad > 0 {
			value += "|" + strings.Repeat("x", l.pad)
		}
		l.sent++
		l.mu.Unlock()
		cl.Produce(ctx, &kgo.Record{Topic: l.topic, Value: []byte(value)}, func(r *kgo.Record, err error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if err != nil {
				l.failed = append(l.failed, fmt.Sprintf("%s: %v", value, err))
				return
			}
			l.acked[value] = ack{r.Partition, r.Offset}
		})
	}
}

// produceWhile sends a few records every 20 ms until the returned stop is called; stop waits
// for every outstanding record's outcome.
func (l *ledger) produceWhile(ctx context.Context, cl *kgo.Client) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				l.send(ctx, cl, 5)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		flush, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		_ = cl.Flush(flush)
	}
}

func (l *ledger) counts() (sent, acked, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, len(l.acked), len(l.failed)
}

// readAll reads every partition of topic from its start to its current end.
func readAll(t testing.TB, seeds []string, topic string) map[int32]map[int64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := adminClient(t, seeds)
	ends, err := admin.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	starts, err := admin.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list start offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", topic, o.Partition, o.Err)
		}
		want[o.Partition] = o.Offset
	})
	starts.Each(func(o kadm.ListedOffset) { from[o.Partition] = kgo.NewOffset().At(o.Offset) })
	got := map[int32]map[int64]string{}
	pending := 0
	for p, end := range want {
		got[p] = map[int64]string{}
		if end > from[p].EpochOffset().Offset {
			pending++
		} else {
			delete(from, p)
		}
	}
	if pending == 0 {
		return got
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	done := map[int32]bool{}
	for len(done) < pending {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: timed out with %d of %d partitions complete", topic, len(done), pending)
		}
		fetches.EachError(func(_ string, p int32, err error) { t.Logf("fetch %s/%d: %v (retrying)", topic, p, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			if _, dup := got[r.Partition][r.Offset]; dup {
				t.Errorf("%s/%d offset %d returned twice", topic, r.Partition, r.Offset)
			}
			got[r.Partition][r.Offset] = string(r.Value)
			if r.Offset+1 >= want[r.Partition] {
				done[r.Partition] = true
			}
		})
	}
	return got
}

// verify checks the seeds' invariant on l's topic: every acknowledged record is read back at
// the offset it was acknowledged at, no record is read twice, and one producer's records are
// in send order within each partition.
func verify(t testing.TB, seeds []string, l *ledger) {
	t.Helper()
	got := readAll(t, seeds, l.topic)
	l.mu.Lock()
	defer l.mu.Unlock()
	where := map[string]string{}
	for p, records := range got {
		for o, v := range records {
			where[v] = fmt.Sprintf("%d@%d", p, o)
		}
	}
	lost := 0
	for value, at := range l.acked {
		if got[at.partition][at.offset] != value {
			lost++
			if lost <= 10 {
				found := where[value]
				if found == "" {
					found = "nowhere"
				}
				t.Errorf("acknowledged %s at %s/%d@%d, read %q there; it is %s", value, l.topic, at.partition, at.offset, got[at.partition][at.offset], found)
			}
		}
	}
	seen := map[string]string{}
	for p, records := range got {
		offsets := make([]int64, 0, len(records))
		for o := range records {
			offsets = append(offsets, o)
		}
		sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
		last := -1
		for _, o := range offsets {
			value := records[o]
			where := fmt.Sprintf("%d@%d", p, o)
			if before, dup := seen[value]; dup {
				t.Errorf("%s read twice: at %s and %s (the idempotent producer must not duplicate)", value, before, where)
			}
			seen[value] = where
			seq, mine := sequence(value, l.prefix)
			if !mine {
				continue
			}
			if seq <= last {
				t.Errorf("%s/%s: %s after sequence %d (out of send order)", l.topic, where, value, last)
			}
			last = seq
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged records lost", lost, len(l.acked))
	}
	t.Logf("%s: %d sent, %d acknowledged, %d failed, %d read back", l.topic, l.sent, len(l.acked), len(l.failed), len(seen))
}

func sequence(value, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(value, prefix+"-")
	if !ok {
		return 0, false
	}
	rest, _, _ = strings.Cut(rest, "|")
	seq, err := strconv.Atoi(rest)
	return seq, err == nil
}

func adminClient(t testing.TB, seeds []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// produceOnce writes one record to topic/partition with a short delivery timeout and returns
// the outcome (nil only when acknowledged).
func produceOnce(ctx context.Context, t testing.TB, seeds []string, topic string, partition int32) error {
	t.Helper()
	return produceWithin(ctx, seeds, topic, partition, 5*time.Second)
}

// produceWithin is one producer's whole life: a franz-go client (idempotent, acks=all), one
// record to topic/partition acknowledged or given up after deliveryTimeout, and its close.
func produceWithin(ctx context.Context, seeds []string, topic string, partition int32, deliveryTimeout time.Duration) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: partition, Value: []byte(fmt.Sprintf("probe-%d", time.Now().UnixNano()))}).FirstErr()
}

// consumeAsGroup consumes want records of topic in consumer group group, commits, and checks
// that the committed offsets are the topic's end offsets.
func consumeAsGroup(t testing.TB, seeds []string, topic, group string, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	for got < want {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group %s read %d of %d records", group, got, want)
		}
		fetches.EachError(func(_ string, p int32, err error) { t.Logf("group fetch %s/%d: %v", topic, p, err) })
		got += fetches.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	admin := kadm.NewClient(cl)
	committed, err := admin.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := admin.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(end kadm.ListedOffset) {
		if end.Offset == 0 {
			return // nothing to consume, nothing committed
		}
		c, ok := committed.Lookup(topic, end.Partition)
		if !ok || c.At != end.Offset {
			t.Errorf("group %s committed %v for %s/%d, end offset %d", group, c.At, topic, end.Partition, end.Offset)
		}
	})
}

// produceAndVerify sends n records with a fresh producer, requires every one acknowledged, and
// verifies the topic against l.
func produceAndVerify(t testing.TB, seeds []string, l *ledger, n int) {
	t.Helper()
	ctx := context.Background()
	cl := producer(t, seeds)
	l.send(ctx, cl, n)
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, acked, failed := l.counts(); acked != n || failed != 0 {
		t.Fatalf("%s: %d of %d acknowledged, failures %v", l.topic, acked, n, l.failed)
	}
	verify(t, seeds, l)
}
