// Command sarama is the IBM/sarama part of the kaas conformance suite: the franz-go program's
// scenarios, with sarama's client. sarama is not idempotent by default, so the producer sets
// Idempotent (which needs acks=all and one request in flight); Version is sarama.MaxVersion,
// the newest Kafka it knows, as a user of a current broker would set it. It prints
//
//	VERSION <tab> sarama vX.Y.Z
//	RESULT <tab> scenario <tab> PASS|FAIL <tab> reason
//
// Usage: sarama BOOTSTRAP [scenario ...]   (BOOTSTRAP: host:port, comma-separated for several)
package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// wait bounds every step, so that a missing feature fails in seconds.
const wait = 15 * time.Second

const records = 200

var (
	bootstrap []string
	run       = strconv.FormatUint(rand.Uint64()%1_000_000_000, 36)
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sarama BOOTSTRAP [scenario ...]")
		os.Exit(2)
	}
	bootstrap = strings.Split(os.Args[1], ",")
	fmt.Printf("VERSION\t%s\n", moduleVersion("github.com/IBM/sarama"))
	scenarios := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"admin", admin},
		{"produce idempotent", produceIdempotent},
		{"consume assign", consumeAssign},
		{"group", group},
		{"transactions", transactions},
	}
	chosen := map[string]bool{}
	for _, a := range os.Args[2:] {
		chosen[a] = true
	}
	for _, s := range scenarios {
		if len(chosen) > 0 && !chosen[s.name] {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
		err := runBounded(ctx, s.fn)
		cancel()
		if err != nil {
			fmt.Printf("RESULT\t%s\tFAIL\t%s\n", s.name, oneLine(err))
		} else {
			fmt.Printf("RESULT\t%s\tPASS\t\n", s.name)
		}
	}
}

// runBounded returns when fn does or when ctx ends: several sarama calls take no context.
func runBounded(ctx context.Context, fn func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return errors.New("scenario timed out")
	}
}

func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "?"
}

func oneLine(err error) string {
	return strings.NewReplacer("\t", " ", "\n", " ").Replace(err.Error())
}

func topic(scenario string) string {
	return "conf-sarama-" + strings.ReplaceAll(scenario, " ", "-") + "-" + run
}

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.MaxVersion
	c.ClientID = "conformance-sarama"
	c.Net.DialTimeout = wait
	c.Net.ReadTimeout = wait
	c.Net.WriteTimeout = wait
	c.Admin.Timeout = wait
	c.Metadata.Retry.Max = 10
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	return c
}

func producerConfig() *sarama.Config {
	c := config()
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Net.MaxOpenRequests = 1
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewManualPartitioner
	c.Producer.Timeout = wait
	return c
}

func adminClient() (sarama.ClusterAdmin, error) {
	return sarama.NewClusterAdmin(bootstrap, config())
}

func createTopic(name string, partitions int32, configs map[string]*string) error {
	adm, err := adminClient()
	if err != nil {
		return err
	}
	defer adm.Close()
	return adm.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1, ConfigEntries: configs}, false)
}

// produce writes keyed records with a header to a new 3-partition topic and checks that each is
// acknowledged at the next offset of its partition.
func produce(scenario string) (string, error) {
	t := topic(scenario)
	if err := createTopic(t, 3, nil); err != nil {
		return "", fmt.Errorf("creating topic: %w", err)
	}
	p, err := sarama.NewSyncProducer(bootstrap, producerConfig())
	if err != nil {
		return "", fmt.Errorf("producer: %w", err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, records)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: t, Partition: int32(i % 3), Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("v%d", i)), Headers: []sarama.RecordHeader{{Key: []byte("h"), Value: []byte(fmt.Sprintf("x%d", i))}}}
	}
	if err := p.SendMessages(msgs); err != nil {
		return "", fmt.Errorf("produce: %w", err)
	}
	next := map[int32]int64{}
	for _, m := range msgs {
		if m.Offset != next[m.Partition] {
			return "", fmt.Errorf("partition %d acked offset %d, expected %d", m.Partition, m.Offset, next[m.Partition])
		}
		next[m.Partition]++
	}
	return t, nil
}

type rec struct {
	partition int32
	key, val  string
	headers   []*sarama.RecordHeader
}

func fromMsg(m *sarama.ConsumerMessage) rec {
	return rec{m.Partition, string(m.Key), string(m.Value), m.Headers}
}

func verify(got []rec, want int) error {
	if len(got) != want {
		return fmt.Errorf("consumed %d records, expected %d", len(got), want)
	}
	last := map[int32]int{}
	for _, r := range got {
		i, err := strconv.Atoi(strings.TrimPrefix(r.key, "k"))
		if err != nil {
			return fmt.Errorf("unexpected key %q", r.key)
		}
		if r.val != fmt.Sprintf("v%d", i) {
			return fmt.Errorf("record %s has value %q", r.key, r.val)
		}
		if len(r.headers) != 1 || string(r.headers[0].Key) != "h" || string(r.headers[0].Value) != fmt.Sprintf("x%d", i) {
			return fmt.Errorf("record %s has %d headers", r.key, len(r.headers))
		}
		if int32(i%3) != r.partition {
			return fmt.Errorf("record %s on partition %d", r.key, r.partition)
		}
		if l, ok := last[r.partition]; ok && l >= i {
			return fmt.Errorf("partition %d out of order at %s", r.partition, r.key)
		}
		last[r.partition] = i
	}
	return nil
}

// consumePartitions reads partitions 0..n-1 of t from the start until want records arrived
// (or wait passed), then `extra` longer.
func consumePartitions(cfg *sarama.Config, t string, partitions int32, want int, extra time.Duration) ([]rec, error) {
	c, err := sarama.NewConsumer(bootstrap, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer c.Close()
	msgs := make(chan rec, 1024)
	errs := make(chan error, 16)
	for p := int32(0); p < partitions; p++ {
		pc, err := c.ConsumePartition(t, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("consume partition %d: %w", p, err)
		}
		defer pc.AsyncClose()
		go func() {
			for m := range pc.Messages() {
				msgs <- fromMsg(m)
			}
		}()
		go func() {
			for e := range pc.Errors() {
				errs <- e
			}
		}()
	}
	var got []rec
	deadline := time.After(wait)
	for len(got) < want {
		select {
		case r := <-msgs:
			got = append(got, r)
		case e := <-errs:
			return got, fmt.Errorf("fetch: %w", e)
		case <-deadline:
			return got, nil
		}
	}
	after := time.After(extra)
	for {
		select {
		case r := <-msgs:
			got = append(got, r)
		case <-after:
			return got, nil
		}
	}
}

func admin(ctx context.Context) error {
	t := topic("admin")
	adm, err := adminClient()
	if err != nil {
		return err
	}
	defer adm.Close()
	brokers, _, err := adm.DescribeCluster()
	if err != nil {
		return fmt.Errorf("describe cluster: %w", err)
	}
	if len(brokers) == 0 {
		return errors.New("describe cluster returned no brokers")
	}
	ret := "3600000"
	if err := adm.CreateTopic(t, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1, ConfigEntries: map[string]*string{"retention.ms": &ret}}, false); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	if err := adm.CreatePartitions(t, 4, nil, false); err != nil {
		return fmt.Errorf("create partitions: %w", err)
	}
	// Metadata may lag the controller for a moment (it does on Apache Kafka): poll for it.
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		md, err := adm.DescribeTopics([]string{t})
		if err != nil {
			return fmt.Errorf("describe topics: %w", err)
		}
		n := 0
		if len(md) == 1 && md[0].Err == sarama.ErrNoError {
			n = len(md[0].Partitions)
		}
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d partitions after increasing 2 to 4", n)
		}
	}
	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: t})
	if err != nil {
		return fmt.Errorf("describe configs: %w", err)
	}
	found := false
	for _, e := range entries {
		if e.Name == "retention.ms" && e.Value == ret {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("retention.ms is not %s", ret)
	}
	if err := adm.DeleteTopic(t); err != nil {
		return fmt.Errorf("delete topic: %w", err)
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		all, err := adm.ListTopics()
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		if _, ok := all[t]; !ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("deleted topic still listed")
		}
	}
}

func produceIdempotent(ctx context.Context) error {
	_, err := produce("produce idempotent")
	return err
}

func consumeAssign(ctx context.Context) error {
	t, err := produce("consume assign")
	if err != nil {
		return err
	}
	got, err := consumePartitions(config(), t, 3, records, 0)
	if err != nil {
		return err
	}
	return verify(got, records)
}

// handler collects what a group member's claims deliver and marks each record.
type handler struct {
	mu       sync.Mutex
	got      []rec
	want     int
	done     chan struct{}
	doneOnce sync.Once
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		s.MarkMessage(m, "")
		h.mu.Lock()
		h.got = append(h.got, fromMsg(m))
		n := len(h.got)
		h.mu.Unlock()
		if n >= h.want {
			s.Commit()
			h.doneOnce.Do(func() { close(h.done) })
		}
	}
	return nil
}

func group(ctx context.Context) error {
	t, err := produce("group")
	if err != nil {
		return err
	}
	g := "conf-sarama-" + run
	cfg := config()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cg, err := sarama.NewConsumerGroup(bootstrap, g, cfg)
	if err != nil {
		return fmt.Errorf("consumer group: %w", err)
	}
	h := &handler{want: records, done: make(chan struct{})}
	cctx, cancel := context.WithCancel(ctx)
	consumeErr := make(chan error, 1)
	go func() {
		for cctx.Err() == nil {
			if err := cg.Consume(cctx, []string{t}, h); err != nil {
				consumeErr <- err
				return
			}
		}
		consumeErr <- nil
	}()
	var cgErr error
	select {
	case <-h.done:
	case <-time.After(wait):
	case cgErr = <-consumeErr:
	case cgErr = <-cg.Errors():
	}
	cancel()
	cg.Close()
	if cgErr != nil {
		return fmt.Errorf("consume: %w", cgErr)
	}
	h.mu.Lock()
	got := h.got
	h.mu.Unlock()
	if err := verify(got, records); err != nil {
		return err
	}
	adm, err := adminClient()
	if err != nil {
		return err
	}
	defer adm.Close()
	offs, err := adm.ListConsumerGroupOffsets(g, map[string][]int32{t: {0, 1, 2}})
	if err != nil {
		return fmt.Errorf("fetch offsets: %w", err)
	}
	var total int64
	for p := int32(0); p < 3; p++ {
		if b := offs.GetBlock(t, p); b != nil && b.Offset > 0 {
			total += b.Offset
		}
	}
	if total != records {
		return fmt.Errorf("committed offsets add up to %d, expected %d", total, records)
	}
	return nil
}

func transactions(ctx context.Context) error {
	t := topic("transactions")
	if err := createTopic(t, 1, nil); err != nil {
		return fmt.Errorf("creating topic: %w", err)
	}
	cfg := producerConfig()
	cfg.Producer.Transaction.ID = "conformance-sarama-txn"
	cfg.Producer.Transaction.Timeout = wait
	p, err := sarama.NewSyncProducer(bootstrap, cfg)
	if err != nil {
		return fmt.Errorf("transactional producer: %w", err)
	}
	defer p.Close()
	for i, commit := range []bool{true, false, true} {
		if err := p.BeginTxn(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		n := 10
		if i == 2 {
			n = 1
		}
		v := "aborted"
		if commit {
			v = "committed"
		}
		for j := 0; j < n; j++ {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: t, Partition: 0, Value: sarama.StringEncoder(v)}); err != nil {
				return fmt.Errorf("transactional produce: %w", err)
			}
		}
		if commit {
			err = p.CommitTxn()
		} else {
			err = p.AbortTxn()
		}
		if err != nil {
			return fmt.Errorf("end transaction (commit=%v): %w", commit, err)
		}
	}
	ccfg := config()
	ccfg.Consumer.IsolationLevel = sarama.ReadCommitted
	// A little longer than the 11 records: aborted records must not arrive.
	got, err := consumePartitions(ccfg, t, 1, 11, 500*time.Millisecond)
	if err != nil {
		return err
	}
	for _, r := range got {
		if r.val != "committed" {
			return errors.New("read_committed consumer saw an aborted record")
		}
	}
	if len(got) != 11 {
		return fmt.Errorf("read_committed consumer read %d records, expected 11", len(got))
	}
	return nil
}
