// Command kafkago is the segmentio/kafka-go part of the kaas conformance suite: the franz-go
// program's scenarios that kafka-go supports. kafka-go has no idempotent producer and no
// transactions: its producer scenario writes with a Writer at acks=all and checks each
// partition's end offset. It prints
//
//	VERSION <tab> kafka-go vX.Y.Z
//	RESULT <tab> scenario <tab> PASS|FAIL <tab> reason
//
// Usage: kafkago BOOTSTRAP [scenario ...]   (BOOTSTRAP: host:port, comma-separated for several)
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
	"time"

	"github.com/segmentio/kafka-go"
)

// wait bounds every step, so that a missing feature fails in seconds.
const wait = 15 * time.Second

const records = 200

var (
	bootstrap []string
	run       = strconv.FormatUint(rand.Uint64()%1_000_000_000, 36)
	cl        *kafka.Client
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kafkago BOOTSTRAP [scenario ...]")
		os.Exit(2)
	}
	bootstrap = strings.Split(os.Args[1], ",")
	cl = &kafka.Client{Addr: kafka.TCP(bootstrap...), Timeout: wait}
	fmt.Printf("VERSION\t%s\n", moduleVersion("github.com/segmentio/kafka-go"))
	scenarios := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"admin", admin},
		{"produce acks=all", produceAcksAll},
		{"consume assign", consumeAssign},
		{"group", group},
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
		err := s.fn(ctx)
		cancel()
		if err != nil {
			fmt.Printf("RESULT\t%s\tFAIL\t%s\n", s.name, oneLine(err))
		} else {
			fmt.Printf("RESULT\t%s\tPASS\t\n", s.name)
		}
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
	r := strings.NewReplacer(" ", "-", "=", "-")
	return "conf-kafkago-" + r.Replace(scenario) + "-" + run
}

func createTopic(ctx context.Context, name string, partitions int, configs ...kafka.ConfigEntry) error {
	resp, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
		{Topic: name, NumPartitions: partitions, ReplicationFactor: 1, ConfigEntries: configs}}})
	if err != nil {
		return err
	}
	if err := resp.Errors[name]; err != nil {
		return err
	}
	// Every broker learns a new topic's leaders a moment after the one that answered
	// CreateTopics (on Apache Kafka too), and kafka-go's Writer gives up on a partition without
	// a leader: wait until the metadata names one for each partition.
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{name}})
		if err == nil && len(md.Topics) == 1 && len(md.Topics[0].Partitions) == partitions && leadersKnown(md.Topics[0].Partitions) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no leader for every partition of %s after %s (%v)", name, wait, err)
		}
	}
}

func leadersKnown(partitions []kafka.Partition) bool {
	for _, p := range partitions {
		if p.Leader.ID < 0 || p.Leader.Host == "" {
			return false
		}
	}
	return true
}

// byKey sends record k<i> to partition i % 3.
type byKey struct{}

func (byKey) Balance(m kafka.Message, partitions ...int) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(string(m.Key), "k"))
	return partitions[i%len(partitions)]
}

// produce writes keyed records with a header to a new 3-partition topic with a Writer at
// acks=all, then checks that each partition's end offset counts exactly its records.
func produce(ctx context.Context, scenario string) (string, error) {
	t := topic(scenario)
	if err := createTopic(ctx, t, 3); err != nil {
		return "", fmt.Errorf("creating topic: %w", err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(bootstrap...), Topic: t, Balancer: byKey{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 10 * time.Millisecond, WriteTimeout: wait, ReadTimeout: wait, MaxAttempts: 10}
	defer w.Close()
	msgs := make([]kafka.Message, records)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i)),
			Headers: []kafka.Header{{Key: "h", Value: []byte(fmt.Sprintf("x%d", i))}}}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		return "", fmt.Errorf("produce: %w", err)
	}
	resp, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		t: {kafka.LastOffsetOf(0), kafka.LastOffsetOf(1), kafka.LastOffsetOf(2)}}})
	if err != nil {
		return "", fmt.Errorf("list offsets: %w", err)
	}
	for _, po := range resp.Topics[t] {
		want := int64((records - po.Partition + 2) / 3)
		if po.Error != nil || po.LastOffset != want {
			return "", fmt.Errorf("partition %d ends at %d (%v), expected %d", po.Partition, po.LastOffset, po.Error, want)
		}
	}
	if n := len(resp.Topics[t]); n != 3 {
		return "", fmt.Errorf("list offsets answered %d partitions, expected 3", n)
	}
	return t, nil
}

func verify(got []kafka.Message, want int) error {
	if len(got) != want {
		return fmt.Errorf("consumed %d records, expected %d", len(got), want)
	}
	last := map[int]int{}
	for _, r := range got {
		i, err := strconv.Atoi(strings.TrimPrefix(string(r.Key), "k"))
		if err != nil {
			return fmt.Errorf("unexpected key %q", r.Key)
		}
		if string(r.Value) != fmt.Sprintf("v%d", i) {
			return fmt.Errorf("record %s has value %q", r.Key, r.Value)
		}
		if len(r.Headers) != 1 || r.Headers[0].Key != "h" || string(r.Headers[0].Value) != fmt.Sprintf("x%d", i) {
			return fmt.Errorf("record %s has headers %v", r.Key, r.Headers)
		}
		if i%3 != r.Partition {
			return fmt.Errorf("record %s on partition %d", r.Key, r.Partition)
		}
		if l, ok := last[r.Partition]; ok && l >= i {
			return fmt.Errorf("partition %d out of order at %s", r.Partition, r.Key)
		}
		last[r.Partition] = i
	}
	return nil
}

// readUntil fetches from r until n messages arrived or wait passed; commit commits each.
func readUntil(ctx context.Context, r *kafka.Reader, n int, commit bool) ([]kafka.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var got []kafka.Message
	for len(got) < n {
		m, err := r.FetchMessage(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			return got, fmt.Errorf("fetch: %w", err)
		}
		got = append(got, m)
	}
	if commit && len(got) > 0 {
		if err := r.CommitMessages(ctx, got...); err != nil {
			return got, fmt.Errorf("commit: %w", err)
		}
	}
	return got, nil
}

func admin(ctx context.Context) error {
	t := topic("admin")
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return errors.New("metadata lists no brokers")
	}
	ret := "3600000"
	if err := createTopic(ctx, t, 2, kafka.ConfigEntry{ConfigName: "retention.ms", ConfigValue: ret}); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	cp, err := cl.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: t, Count: 4}}})
	if err == nil {
		err = cp.Errors[t]
	}
	if err != nil {
		return fmt.Errorf("create partitions: %w", err)
	}
	// Metadata may lag the controller for a moment (it does on Apache Kafka): poll for it.
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{t}})
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		n := 0
		if len(md.Topics) == 1 && md.Topics[0].Error == nil {
			n = len(md.Topics[0].Partitions)
		}
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d partitions after increasing 2 to 4", n)
		}
	}
	dc, err := cl.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: t}}})
	if err != nil {
		return fmt.Errorf("describe configs: %w", err)
	}
	found := false
	for _, res := range dc.Resources {
		if res.Error != nil {
			return fmt.Errorf("describe configs: %w", res.Error)
		}
		for _, e := range res.ConfigEntries {
			if e.ConfigName == "retention.ms" && e.ConfigValue == ret {
				found = true
			}
		}
	}
	if !found {
		return fmt.Errorf("retention.ms is not %s", ret)
	}
	dt, err := cl.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{t}})
	if err == nil {
		err = dt.Errors[t]
	}
	if err != nil {
		return fmt.Errorf("delete topic: %w", err)
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		md, err := cl.Metadata(ctx, &kafka.MetadataRequest{})
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		listed := false
		for _, tp := range md.Topics {
			listed = listed || tp.Name == t
		}
		if !listed {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("deleted topic still listed")
		}
	}
}

func produceAcksAll(ctx context.Context) error {
	_, err := produce(ctx, "produce acks=all")
	return err
}

func consumeAssign(ctx context.Context) error {
	t, err := produce(ctx, "consume assign")
	if err != nil {
		return err
	}
	var got []kafka.Message
	for p := 0; p < 3; p++ {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: bootstrap, Topic: t, Partition: p, MaxWait: 500 * time.Millisecond})
		if err := r.SetOffset(kafka.FirstOffset); err != nil {
			r.Close()
			return err
		}
		ms, err := readUntil(ctx, r, (records-p+2)/3, false)
		r.Close()
		if err != nil {
			return err
		}
		got = append(got, ms...)
	}
	return verify(got, records)
}

func group(ctx context.Context) error {
	t, err := produce(ctx, "group")
	if err != nil {
		return err
	}
	g := "conf-kafkago-" + run
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: bootstrap, GroupID: g, Topic: t, StartOffset: kafka.FirstOffset,
		MaxWait: 500 * time.Millisecond, HeartbeatInterval: time.Second, SessionTimeout: wait})
	got, err := readUntil(ctx, r, records, true)
	r.Close()
	if err != nil {
		return err
	}
	if err := verify(got, records); err != nil {
		return err
	}
	resp, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: g, Topics: map[string][]int{t: {0, 1, 2}}})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		return fmt.Errorf("fetch offsets: %w", err)
	}
	var total int64
	for _, p := range resp.Topics[t] {
		if p.Error != nil {
			return fmt.Errorf("fetch offsets %s[%d]: %w", t, p.Partition, p.Error)
		}
		total += p.CommittedOffset
	}
	if total != records {
		return fmt.Errorf("committed offsets add up to %d, expected %d", total, records)
	}
	return nil
}
