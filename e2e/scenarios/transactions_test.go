package scenarios

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// transactionOutlivesItsCoordinator: a franz-go transaction over every partition of orders
// (led by different brokers, so its markers go out by WriteTxnMarkers); its commit cannot
// finish because one partition's leader is SIGSTOPped, and its coordinator is killed -9 with
// the outcome decided. Whoever coordinates the shard next must complete it: the commit
// succeeds for the client, read_committed consumers see every record exactly once, and no
// partition is left with an open transaction (last stable offset = high watermark).
func (e *seedsEnv) transactionOutlivesItsCoordinator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const id = "e2e-spanning"
	const topic = "orders"
	admin := adminClient(t, e.seeds())
	var coordinator int32 = -1
	e.Eventually(time.Minute, "a transaction coordinator for "+id, func() (bool, error) {
		r := admin.FindTxnCoordinators(ctx, id)[id]
		coordinator = r.NodeID
		return r.Err == nil, r.Err
	})
	lagging := -1
	for p := range 3 {
		if leader, _ := e.leaderOf(t, topic, p); int32(leader) != coordinator {
			lagging = leader
			break
		}
	}
	if lagging < 0 {
		t.Fatalf("broker %d leads every partition of %s", coordinator, topic)
	}

	cl := producer(t, e.seeds(), kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(2*time.Minute))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for p := range int32(3) {
		for i := range 10 {
			v := fmt.Sprintf("txn-%d-%d", p, i)
			want = append(want, v)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("producing %s: %v", v, err)
			}
		}
	}
	lagPod, coordPod := fmt.Sprintf("kc-%d", lagging), fmt.Sprintf("kc-%d", coordinator)
	t.Logf("coordinator %s, SIGSTOPping %s before the commit", coordPod, lagPod)
	e.Signal(ns, lagPod, "", syscall.SIGSTOP)
	ended := make(chan error, 1)
	go func() { ended <- cl.EndTransaction(ctx, kgo.TryCommit) }()
	time.Sleep(2 * time.Second)
	e.Signal(ns, coordPod, "", syscall.SIGKILL)
	time.Sleep(time.Second)
	e.Signal(ns, lagPod, "", syscall.SIGCONT)
	if err := <-ended; err != nil {
		t.Errorf("committing across the coordinator's death: %v", err)
	}

	rd, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	seen := map[string]int{}
	for len(seen) < len(want) && ctx.Err() == nil {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if v := string(r.Value); strings.HasPrefix(v, "txn-") {
				seen[v]++
			}
		})
	}
	for _, v := range want {
		if seen[v] != 1 {
			t.Errorf("read_committed saw %s %d times", v, seen[v])
		}
	}
	e.Eventually(time.Minute, "no open transaction left in "+topic, func() (bool, error) {
		stable, err := admin.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return false, err
		}
		ends, err := admin.ListEndOffsets(ctx, topic)
		if err != nil {
			return false, err
		}
		open := []string{}
		ends.Each(func(o kadm.ListedOffset) {
			if s, ok := stable.Lookup(topic, o.Partition); !ok || s.Offset != o.Offset {
				open = append(open, fmt.Sprintf("%d: stable %d, end %d", o.Partition, s.Offset, o.Offset))
			}
		})
		return len(open) == 0, fmt.Errorf("%v", open)
	})
	described, err := admin.DescribeTransactions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d := described[id]; d.State != "CompleteCommit" {
		t.Errorf("%s is %s on broker %d, want CompleteCommit", id, d.State, d.Coordinator)
	}
}
