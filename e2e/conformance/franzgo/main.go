// Command franzgo is the franz-go part of the kaas conformance suite: round trips against one
// broker with franz-go's default client settings (idempotent, acks=all), printing one line per
// scenario, after the franz-go release it runs:
//
//	VERSION <tab> vX.Y.Z
//	RESULT <tab> scenario <tab> PASS|FAIL <tab> reason
//
// Usage: franzgo BOOTSTRAP [scenario ...]   (BOOTSTRAP: host:port, comma-separated for several)
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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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
		fmt.Fprintln(os.Stderr, "usage: franzgo BOOTSTRAP [scenario ...]")
		os.Exit(2)
	}
	// Like the Kafka clients' bootstrap.servers: a comma-separated list (e.g. a cluster's brokers).
	bootstrap = strings.Split(os.Args[1], ",")
	fmt.Printf("VERSION\t%s\n", moduleVersion("github.com/twmb/franz-go"))
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
	return "conf-franzgo-" + strings.ReplaceAll(scenario, " ", "-") + "-" + run
}

func client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bootstrap...), kgo.RequestTimeoutOverhead(wait)}, opts...)...)
}

func createTopic(ctx context.Context, name string, partitions int32) error {
	cl, err := client()
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, name)
	if err != nil {
		return err
	}
	return resp.Err
}

// produce writes keyed records with a header to a new 3-partition topic and checks that each is
// acknowledged at the next offset of its partition.
func produce(ctx context.Context, scenario string) (string, error) {
	t := topic(scenario)
	if err := createTopic(ctx, t, 3); err != nil {
		return "", fmt.Errorf("creating topic: %w", err)
	}
	cl, err := client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	rs := make([]*kgo.Record, records)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: t, Partition: int32(i % 3), Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i)),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprintf("x%d", i))}}}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return "", fmt.Errorf("produce: %w", err)
	}
	next := map[int32]int64{}
	for _, r := range rs {
		if r.Offset != next[r.Partition] {
			return "", fmt.Errorf("partition %d acked offset %d, expected %d", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
	return t, nil
}

func verify(got []*kgo.Record, want int) error {
	if len(got) != want {
		return fmt.Errorf("consumed %d records, expected %d", len(got), want)
	}
	last := map[int32]int{}
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
		if int32(i%3) != r.Partition {
			return fmt.Errorf("record %s on partition %d", r.Key, r.Partition)
		}
		if l, ok := last[r.Partition]; ok && l >= i {
			return fmt.Errorf("partition %d out of order at %s", r.Partition, r.Key)
		}
		last[r.Partition] = i
	}
	return nil
}

func pollUntil(ctx context.Context, cl *kgo.Client, n int) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return got, ferr
		}
		got = append(got, fs.Records()...)
	}
	return got, nil
}

func admin(ctx context.Context) error {
	t := topic("admin")
	cl, err := client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.BrokerMetadata(ctx); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	ret := "3600000"
	if resp, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"retention.ms": &ret}, t); err != nil || resp.Err != nil {
		return fmt.Errorf("create topic: %w", errors.Join(err, resp.Err))
	}
	// kadm's CreatePartitions reads the current count from metadata, which may not have the new
	// topic yet (Apache Kafka's brokers learn it from the controller a moment after CreateTopics
	// answers): wait until metadata shows it, as an application would retry.
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		td, err := adm.ListTopics(ctx, t)
		if err != nil {
			return err
		}
		if td[t].Err == nil && len(td[t].Partitions) == 2 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("metadata shows %d partitions of %s (%v) %s after CreateTopics", len(td[t].Partitions), t, td[t].Err, wait)
		}
	}
	if resp, err := adm.CreatePartitions(ctx, 2, t); err != nil || resp[t].Err != nil {
		return fmt.Errorf("create partitions: %w", errors.Join(err, resp[t].Err))
	}
	// Metadata may lag the controller for a moment (it does on Apache Kafka): poll for it.
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		td, err := adm.ListTopics(ctx, t)
		if err != nil {
			return err
		}
		n := len(td[t].Partitions)
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d partitions after adding 2 to 2", n)
		}
	}
	rc, err := adm.DescribeTopicConfigs(ctx, t)
	if err != nil {
		return fmt.Errorf("describe configs: %w", err)
	}
	c, err := rc.On(t, nil)
	if err != nil || c.Err != nil {
		return fmt.Errorf("describe configs: %w", errors.Join(err, c.Err))
	}
	found := false
	for _, e := range c.Configs {
		if e.Key == "retention.ms" && e.MaybeValue() == ret {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("retention.ms is not %s", ret)
	}
	if _, err := adm.DeleteTopics(ctx, t); err != nil {
		return fmt.Errorf("delete topic: %w", err)
	}
	return nil
}

func produceIdempotent(ctx context.Context) error {
	_, err := produce(ctx, "produce idempotent")
	return err
}

func consumeAssign(ctx context.Context) error {
	t, err := produce(ctx, "consume assign")
	if err != nil {
		return err
	}
	cl, err := client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart(), 2: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return err
	}
	defer cl.Close()
	got, err := pollUntil(ctx, cl, records)
	if err != nil {
		return err
	}
	return verify(got, records)
}

func group(ctx context.Context) error {
	t, err := produce(ctx, "group")
	if err != nil {
		return err
	}
	g := "conf-franzgo-" + run
	cl, err := client(kgo.ConsumerGroup(g), kgo.ConsumeTopics(t), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		return err
	}
	got, err := pollUntil(ctx, cl, records)
	if err == nil {
		err = verify(got, records)
	}
	if err == nil {
		err = cl.CommitUncommittedOffsets(ctx)
	}
	cl.Close()
	if err != nil {
		return err
	}
	acl, err := client()
	if err != nil {
		return err
	}
	defer acl.Close()
	offs, err := kadm.NewClient(acl).FetchOffsets(ctx, g)
	if err != nil {
		return fmt.Errorf("fetch offsets: %w", err)
	}
	var total int64
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != records {
		return fmt.Errorf("committed offsets add up to %d, expected %d", total, records)
	}
	return nil
}

func transactions(ctx context.Context) error {
	t := topic("transactions")
	if err := createTopic(ctx, t, 1); err != nil {
		return fmt.Errorf("creating topic: %w", err)
	}
	cl, err := client(kgo.TransactionalID("conformance-franzgo-txn"), kgo.DefaultProduceTopic(t))
	if err != nil {
		return err
	}
	defer cl.Close()
	// Each step gets `wait`: a broker that never answers InitProducerId fails in seconds.
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for i, commit := range []bool{true, false, true} {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		n := 10
		if i == 2 {
			n = 1
		}
		for j := 0; j < n; j++ {
			v := "aborted"
			if commit {
				v = "committed"
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				return fmt.Errorf("transactional produce: %w", err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			return fmt.Errorf("end transaction (commit=%v): %w", commit, err)
		}
	}
	rc, err := client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t: {0: kgo.NewOffset().AtStart()}}), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer rc.Close()
	got, err := pollUntil(ctx, rc, 11)
	if err != nil {
		return err
	}
	// A little longer: aborted records must not arrive.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	got = append(got, rc.PollFetches(short).Records()...)
	cancel()
	for _, r := range got {
		if string(r.Value) != "committed" {
			return errors.New("read_committed consumer saw an aborted record")
		}
	}
	if len(got) != 11 {
		return fmt.Errorf("read_committed consumer read %d records, expected 11", len(got))
	}
	return nil
}
