package scenarios

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The clients of BenchmarkScaleCluster beyond its producer: consumer groups, idempotent
// producers and idle connections, as many as goal 4 of the scale issue names.

// groupFigures has groups groups commit an offset each (as standalone consumers and admin tools
// do: generation -1, no member), one request at a time from one franz-go client, which sends
// each to its group's coordinator. Each group commits twice and the second commit is timed, so
// the figure is the commit (a fenced fsync on the volume), not the coordinator lookup before the
// first. Then ListGroups on every broker must list them all.
func groupFigures(b *testing.B, e *seedsEnv, groups int, topics []string) string {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	group := func(g int) string { return fmt.Sprintf("scale-group-%05d", g) }
	commit := func(g int, offset int64) time.Duration {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation = group(g), -1
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = topics[g%len(topics)]
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset = 0, offset
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
		start := time.Now()
		resp, err := req.RequestWith(ctx, cl)
		took := time.Since(start)
		if err != nil {
			b.Fatalf("OffsetCommit for %s: %v", req.Group, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			b.Fatalf("OffsetCommit for %s: %d topics in the response", req.Group, len(resp.Topics))
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			b.Fatalf("OffsetCommit for %s: error %d", req.Group, code)
		}
		return took
	}
	for g := range groups {
		commit(g, 1)
	}
	took := make([]time.Duration, 0, groups)
	for g := range groups {
		took = append(took, commit(g, 2))
	}
	start := time.Now()
	listed := 0
	for _, shard := range cl.RequestSharded(ctx, kmsg.NewPtrListGroupsRequest()) {
		if shard.Err != nil {
			b.Fatalf("ListGroups on broker %d: %v", shard.Meta.NodeID, shard.Err)
		}
		resp := shard.Resp.(*kmsg.ListGroupsResponse)
		if resp.ErrorCode != 0 {
			b.Fatalf("ListGroups on broker %d: error %d", shard.Meta.NodeID, resp.ErrorCode)
		}
		for _, g := range resp.Groups {
			if strings.HasPrefix(g.Group, "scale-group-") {
				listed++
			}
		}
	}
	listTook := time.Since(start)
	if listed != groups {
		b.Fatalf("ListGroups listed %d of %d groups", listed, groups)
	}
	slices.Sort(took)
	return fmt.Sprintf("OffsetCommit (each a fenced fsync) p50 %.1f ms, p99 %.1f ms, max %.1f ms; ListGroups on every broker listed all %d in %.1f ms",
		quantile(took, 0.5), quantile(took, 0.99), quantile(took, 1), listed, ms(listTook))
}

// producerFigures starts producers idempotent franz-go producers, 20 at a time, each a client of
// its own that produces one record (acks=all) to a partition of its own and closes: its
// InitProducerId, its metadata and its first batch.
func producerFigures(b *testing.B, e *seedsEnv, producers int, topics []string, partitions int32) string {
	b.Helper()
	const together = 20
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failed  error
		took    []time.Duration
		started = time.Now()
		slots   = make(chan struct{}, together)
	)
	for n := range producers {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			topic, partition := topics[n%len(topics)], int32(n/len(topics))%partitions
			err := produceWithin(ctx, e.seeds(), topic, partition, 2*time.Minute)
			if err != nil {
				err = fmt.Errorf("%s/%d: %w", topic, partition, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = err
			}
			took = append(took, time.Since(start))
		}()
	}
	wg.Wait()
	all := time.Since(started)
	if failed != nil {
		b.Fatalf("an idempotent producer: %v", failed)
	}
	slices.Sort(took)
	return fmt.Sprintf("%.1f s in all; each from its client's start to its first acknowledgement p50 %.0f ms, p99 %.0f ms",
		all.Seconds(), quantile(took, 0.5), quantile(took, 0.99))
}

// connectionFigures opens connections client connections, spread evenly over the brokers' Kafka
// listeners, each asking ApiVersions once and then staying open and idle; reads every broker's
// footprint while they are held; and closes them. All come from this process's one address, so
// the bench's cluster raises max.connections.per.ip (kaas's default is 1,000 an address).
func connectionFigures(b *testing.B, e *seedsEnv, connections, brokers int) (string, footprint) {
	b.Helper()
	addresses := make([]string, brokers)
	for id := range addresses {
		addresses[id] = e.PodAddr(ns, fmt.Sprintf("kc-%d", id), 9092)
	}
	held := make([]net.Conn, 0, connections)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	start := time.Now()
	for n := range connections {
		c, err := apiVersionsConnection(addresses[n%len(addresses)], int32(n))
		if err != nil {
			b.Fatalf("connection %d of %d: %v", n+1, connections, err)
		}
		held = append(held, c)
	}
	opened := time.Since(start)
	return fmt.Sprintf("opened and answered ApiVersions in %.1f s", opened.Seconds()), footprints(b, e, brokers)
}

// apiVersionsConnection dials address and asks ApiVersions v0 (a request header v1 with client
// id "scale"), reading the whole answer.
func apiVersionsConnection(address string, correlation int32) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", address, 30*time.Second)
	if err != nil {
		return nil, err
	}
	const client = "scale"
	request := binary.BigEndian.AppendUint32(nil, uint32(2+2+4+2+len(client)))
	request = binary.BigEndian.AppendUint16(request, 18) // ApiVersions
	request = binary.BigEndian.AppendUint16(request, 0)
	request = binary.BigEndian.AppendUint32(request, uint32(correlation))
	request = binary.BigEndian.AppendUint16(request, uint16(len(client)))
	request = append(request, client...)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	answer, err := func() ([]byte, error) {
		if _, err := c.Write(request); err != nil {
			return nil, err
		}
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return nil, err
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		_, err := io.ReadFull(c, body)
		return body, err
	}()
	if err == nil && (len(answer) < 6 || int32(binary.BigEndian.Uint32(answer)) != correlation || binary.BigEndian.Uint16(answer[4:]) != 0) {
		err = fmt.Errorf("ApiVersions answered %x", answer[:min(len(answer), 6)])
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
