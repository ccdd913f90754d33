package scenarios

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

// The seeded fault campaign on the real control plane: the faults only a real cluster has —
// the kubelet restarting a killed broker, a deleted pod draining, the controller's pod killed,
// a paused pod the API server still calls Running — and one node's NFS mount failing writes,
// while an idempotent producer writes and a consumer group commits after every poll. The
// in-process campaign (broker/kaas/tests/chaos.rs, `make chaos`) runs many more faults of more
// kinds; this one checks the same invariants against the operator's StatefulSet, the Lease in
// the API server and kaas-nfsfs mounts.
//
// KAAS_E2E_CHAOS_FAULTS (default 8) and KAAS_E2E_CHAOS_SEED (default: the clock; printed) size
// and replay it; the seed fixes the faults, their victims and pauses (timing still varies).

const (
	campaignTopic = "campaign"
	campaignGroup = "campaign-group"
)

var campaignFaults = []string{"kill", "pause", "kill-controller", "drain", "volume-eio"}

func envInt(name string, fallback int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return fallback
}

func (e *seedsEnv) faultCampaign(t *testing.T) {
	seed := envInt("KAAS_E2E_CHAOS_SEED", time.Now().UnixNano())
	faults := int(envInt("KAAS_E2E_CHAOS_FAULTS", 8))
	t.Logf("fault campaign: seed %d, %d faults (replay: KAAS_E2E_CHAOS_SEED=%d KAAS_E2E_CHAOS_FAULTS=%d)", seed, faults, seed, faults)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	e.Apply(kaastest.Topic(campaignTopic, 3, ""))
	e.WaitJSONPath(2*time.Minute, ns, "kafkatopic", campaignTopic, `.status.conditions[?(@.type=="Ready")].status`, "True")
	ctx := context.Background()
	records := newLedger(campaignTopic, "campaign")
	stopProducing := records.produceWhile(ctx, producer(t, e.seeds()))
	group := startCommitter(t, e.seeds())
	defer group.stop()

	e.progressed(t, records, group, "before the first fault")
	for i := range faults {
		kind := campaignFaults[rng.IntN(len(campaignFaults))]
		victim := rng.IntN(3)
		t.Logf("fault campaign: fault %d/%d: %s (broker %d)", i+1, faults, kind, victim)
		e.inject(t, rng, kind, victim)
		e.waitBrokersReady(3 * time.Minute)
		e.progressed(t, records, group, fmt.Sprintf("after fault %d (%s)", i+1, kind))
	}
	stopProducing()
	group.stop()

	verify(t, e.seeds(), records)
	group.verify(t, e.seeds())
	_, acked, failed := records.counts()
	commits, checks := group.counts()
	t.Logf("fault campaign: seed %d, %d faults; %d records acknowledged (%d failed after the client's retries), all read back once in order; %d commits acknowledged, none lost or moved back (%d first-record checks after an assignment)",
		seed, faults, acked, failed, commits, checks)
}

// inject runs one fault against broker victim and waits until it is over (the broker back).
func (e *seedsEnv) inject(t *testing.T, rng *rand.Rand, kind string, victim int) {
	pod := fmt.Sprintf("kc-%d", victim)
	switch kind {
	case "kill":
		restarts := e.Pod(ns, pod).Status.ContainerStatuses[0].RestartCount
		e.Signal(ns, pod, "", syscall.SIGKILL)
		e.Eventually(2*time.Minute, pod+" restarted and ready", func() (bool, error) {
			p := e.Pod(ns, pod)
			return harness.IsReady(p) && p.Status.ContainerStatuses[0].RestartCount > restarts, nil
		})
	case "pause":
		pause := time.Duration(2+rng.IntN(7)) * time.Second
		e.Signal(ns, pod, "", syscall.SIGSTOP)
		time.Sleep(pause)
		e.Signal(ns, pod, "", syscall.SIGCONT)
	case "kill-controller":
		// Right after an earlier fault the Lease may be between holders.
		var holder string
		e.Eventually(time.Minute, "a controller Lease holder", func() (bool, error) {
			holder = e.JSONPath(ns, "lease", "kc-controller", ".spec.holderIdentity")
			return holder != "", nil
		})
		e.Signal(ns, holder, "", syscall.SIGKILL)
	case "drain":
		e.MustKubectl("-n", ns, "delete", "pod", pod, "--wait=true", "--timeout=90s")
	case "volume-eio":
		node := e.Pod(ns, pod).Spec.NodeName
		partition := fmt.Sprintf("%s/%d", campaignTopic, rng.IntN(3))
		for _, op := range []string{"write-error", "fsync-error"} {
			if _, err := e.nfs.do(fmt.Sprintf("%s %s EIO 0 %s", op, node, partition)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Duration(2+rng.IntN(4)) * time.Second)
		if _, err := e.nfs.do("clear"); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown fault %q", kind)
	}
}

// progressed waits until the producer has more records acknowledged and the group more commits
// acknowledged than when it was called: nothing is stuck.
func (e *seedsEnv) progressed(t *testing.T, records *ledger, group *committer, when string) {
	_, acked, _ := records.counts()
	commits, _ := group.counts()
	e.Eventually(2*time.Minute, "the producer and the group to make progress "+when, func() (bool, error) {
		_, nowAcked, _ := records.counts()
		nowCommits, _ := group.counts()
		if err := group.failure(); err != nil {
			t.Fatal(err)
		}
		return nowAcked > acked && nowCommits > commits, fmt.Errorf("records acknowledged %d → %d, commits %d → %d", acked, nowAcked, commits, nowCommits)
	})
}

// committer is one consumer-group member that commits what it polled after every poll and
// remembers, per partition, the highest commit the coordinator acknowledged.
type committer struct {
	cl     *kgo.Client
	done   chan struct{}
	closed chan struct{}
	once   sync.Once

	mu sync.Mutex
	// acked is the highest acknowledged commit per partition.
	acked map[int32]int64
	// fresh holds the partitions assigned since their last record: the first record polled
	// from each must not lie below its acknowledged commit.
	fresh   map[int32]bool
	commits int
	checks  int
	broken  error
}

func startCommitter(t *testing.T, seeds []string) *committer {
	c := &committer{done: make(chan struct{}), closed: make(chan struct{}), acked: map[int32]int64{}, fresh: map[int32]bool{}}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(campaignGroup),
		kgo.ConsumeTopics(campaignTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// Assignments change only between polls, so a poll's records and their commit belong
		// to one assignment.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, p := range assigned[campaignTopic] {
				c.fresh[p] = true
			}
		}),
		kgo.MetadataMinAge(250*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	c.cl = cl
	go c.run()
	return c
}

func (c *committer) run() {
	defer close(c.closed)
	for {
		select {
		case <-c.done:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fetches := c.cl.PollFetches(ctx)
		cancel()
		next := map[int32]kgo.EpochOffset{}
		fetches.EachRecord(func(r *kgo.Record) {
			c.checkFirst(r)
			next[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		})
		if len(next) > 0 {
			c.commit(next)
		}
		c.cl.AllowRebalance()
	}
}

// checkFirst: a member is never handed a record below an offset whose commit was acknowledged.
func (c *committer) checkFirst(r *kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fresh[r.Partition] {
		return
	}
	delete(c.fresh, r.Partition)
	c.checks++
	if acked, ok := c.acked[r.Partition]; ok && r.Offset < acked && c.broken == nil {
		c.broken = fmt.Errorf("%s/%d: the group resumed at offset %d below its acknowledged commit %d", campaignTopic, r.Partition, r.Offset, acked)
	}
}

func (c *committer) commit(next map[int32]kgo.EpochOffset) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{campaignTopic: next}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil || resp == nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, topic := range resp.Topics {
			for _, p := range topic.Partitions {
				offset, ok := next[p.Partition]
				if p.ErrorCode != 0 || !ok {
					continue
				}
				c.commits++
				if offset.Offset > c.acked[p.Partition] {
					c.acked[p.Partition] = offset.Offset
				}
			}
		}
	})
}

func (c *committer) counts() (commits, checks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commits, c.checks
}

func (c *committer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken
}

func (c *committer) stop() {
	c.once.Do(func() {
		close(c.done)
		<-c.closed
		c.cl.Close()
	})
}

// verify: no acknowledged commit was lost or moved back — the group's committed offsets are at
// least the highest acknowledged ones.
func (c *committer) verify(t *testing.T, seeds []string) {
	t.Helper()
	if err := c.failure(); err != nil {
		t.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	committed, err := adminClient(t, seeds).FetchOffsets(ctx, campaignGroup)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var summary []string
	for p, acked := range c.acked {
		got, ok := committed.Lookup(campaignTopic, p)
		if !ok || got.At < acked {
			t.Errorf("%s/%d: committed offset %v, below the acknowledged commit %d", campaignTopic, p, got.At, acked)
		}
		summary = append(summary, fmt.Sprintf("%d@%d", p, acked))
	}
	if len(c.acked) == 0 {
		t.Error("the group had no commit acknowledged")
	}
	t.Logf("%s: acknowledged commits %s", campaignGroup, strings.Join(summary, " "))
}
