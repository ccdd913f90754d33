package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

const ns = kaastest.Namespace

// The cluster under test: three brokers, one per node (each node has its own NFS mount), with
// short timeouts so that failover fits a test run.
var clusterYAML = kaastest.Cluster(`  timeouts: {fenceTimeoutMs: 3000, sessionTimeoutMs: 5000}
  config: {lease.duration.ms: "5000", housekeeping.interval.ms: "1000", drain.timeout.ms: "20000"}
  podTemplate:
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app.kubernetes.io/component: broker}}
          topologyKey: kubernetes.io/hostname
`)

// defaultsYAML is clusterYAML with the default timeouts, Lease and housekeeping interval: a
// user's cluster, for figures a user can expect (the short test timings are tuned for an idle
// machine, and at thousands of partitions this 2-core machine is anything but).
var defaultsYAML = kaastest.Cluster(onePodANode)

// onePodANode is the spec's podTemplate that puts each broker pod on a node of its own.
const onePodANode = `  podTemplate:
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app.kubernetes.io/component: broker}}
          topologyKey: kubernetes.io/hostname
`

// namesWith lists the names in dir that match(name, pattern) (strings.HasPrefix/HasSuffix).
func namesWith(dir string, match func(string, string) bool, pattern string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, entry := range entries {
		if match(entry.Name(), pattern) {
			names = append(names, entry.Name())
		}
	}
	return names, nil
}

// assignment is the part of __cluster/assignment.json the scenarios look at.
type assignment struct {
	ControllerEpoch   int64 `json:"controllerEpoch"`
	AssignmentVersion int64 `json:"assignmentVersion"`
	ControllerID      int   `json:"controllerId"`
	Partitions        map[string]struct {
		TopicID     string `json:"topicId"`
		Leader      int    `json:"leader"`
		LeaderEpoch int    `json:"leaderEpoch"`
	} `json:"partitions"`
}

func readAssignment(export string) (assignment, error) {
	var a assignment
	b, err := os.ReadFile(filepath.Join(export, "__cluster", "assignment.json"))
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	return a, err
}

type seedsEnv struct {
	*harness.Cluster
	export string
	nfs    *nfs
}

// bootstrap is what the cluster's status.bootstrapServers says: its bootstrap Service, a
// cluster IP the harness' service proxy forwards to a ready broker, by its cluster DNS name.
var bootstrap = fmt.Sprintf("kc-bootstrap.%s.svc:9092", ns)

// seeds are what a client in the cluster is given, as a user's is: the bootstrap Service. The
// brokers it then learns are the names they advertise (listener.advertise PodDns, the default),
// which the test process resolves through the cluster DNS too.
func (e *seedsEnv) seeds() []string { return []string{bootstrap} }

// leaderOf is the broker leading topic/partition in the current assignment.
func (e *seedsEnv) leaderOf(t testing.TB, topic string, partition int) (int, int) {
	t.Helper()
	a, err := readAssignment(e.export)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := a.Partitions[fmt.Sprintf("%s/%d", topic, partition)]
	if !ok {
		t.Fatalf("%s/%d is not in assignment v%d", topic, partition, a.AssignmentVersion)
	}
	return p.Leader, p.LeaderEpoch
}

// waitMoved waits until topic/partition is led by another broker than from (or by from at a
// higher epoch, after a restart), and returns the new leader.
func (e *seedsEnv) waitMoved(timeout time.Duration, topic string, partition, from, epoch int) int {
	var leader int
	e.Eventually(timeout, fmt.Sprintf("%s/%d to move from broker %d (epoch %d)", topic, partition, from, epoch), func() (bool, error) {
		a, err := readAssignment(e.export)
		if err != nil {
			return false, err
		}
		p := a.Partitions[fmt.Sprintf("%s/%d", topic, partition)]
		leader = p.Leader
		return p.LeaderEpoch > epoch, fmt.Errorf("leader %d epoch %d", p.Leader, p.LeaderEpoch)
	})
	return leader
}

// whileProducing runs fault while a producer writes to orders, then lets it run two more
// seconds, stops it and verifies what it was acknowledged.
func (e *seedsEnv) whileProducing(t testing.TB, prefix string, fault func()) *ledger {
	t.Helper()
	l := newLedger("orders", prefix)
	stop := l.produceWhile(context.Background(), producer(t, e.seeds()))
	time.Sleep(time.Second)
	fault()
	time.Sleep(2 * time.Second)
	stop()
	verify(t, e.seeds(), l)
	return l
}

func (e *seedsEnv) waitBrokersReady(timeout time.Duration) {
	e.WaitJSONPath(timeout, ns, "kafkacluster", "kc", ".status.readyBrokers", "3")
	for i := range 3 {
		e.WaitPodReady(ns, fmt.Sprintf("kc-%d", i), timeout)
	}
}

// startCluster brings up kaas-nfsfs (one mount per node over one export), a 3-node control
// plane, the operator from config/ and the 3-broker KafkaCluster, and waits until it is Ready.
func startCluster(t testing.TB) *seedsEnv {
	return startClusterWith(t, clusterYAML)
}

// startClusterWith is startCluster with the KafkaCluster manifest `cluster`.
func startClusterWith(t testing.TB, cluster string) *seedsEnv {
	root := repoRoot(t)
	nfsBin := harness.CargoBinary(t, "KAAS_NFSFS_BIN", "kaas-nfsfs")

	// The NFS export, served through one mount per node; started before the cluster so that
	// it outlives every pod that has files open on it.
	work := t.TempDir()
	export := filepath.Join(work, "export")
	if err := os.MkdirAll(export, 0o755); err != nil {
		t.Fatal(err)
	}
	// The export is writable by the images' user, as a user's NFS export for kaas must be.
	kaastest.WritableByImages(t, export)
	nodes := []string{"kaas-e2e-node-0", "kaas-e2e-node-1", "kaas-e2e-node-2"}
	server := startNFS(t, nfsBin, export, work, nodes)

	// The operator, its volume agent and the brokers run from their images, pulled from the
	// harness registry under their published names.
	c := harness.Start(t, kaastest.Pulled(t, harness.Options{Nodes: 3}))
	for _, node := range c.Nodes {
		c.MapVolume(node, "shared", server.mounts[node])
	}
	e := &seedsEnv{Cluster: c, export: export, nfs: server}

	c.MustKubectl("apply", "-k", filepath.Join(root, "config", "default"))
	for _, crd := range []string{"kafkaclusters", "kafkatopics", "kafkaclusterassignments"} {
		c.MustKubectl("wait", "--for=condition=Established", "crd/"+crd+".kaas.dev", "--timeout=60s")
	}
	c.Apply(cluster)
	e.WaitJSONPath(4*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
	e.waitBrokersReady(2 * time.Minute)
	if got := e.JSONPath(ns, "kafkacluster", "kc", ".status.bootstrapServers"); got != bootstrap {
		t.Fatalf("status.bootstrapServers = %q, want %q", got, bootstrap)
	}
	// The claim is the one the operator made, bound to the harness' volume.
	if got := e.JSONPath(ns, "persistentvolumeclaim", "kc-data", ".spec.volumeName"); got != "shared" {
		t.Fatalf("claim kc-data bound to %q, want the volume shared", got)
	}
	return e
}

func TestSeeds(t *testing.T) {
	e := startCluster(t)
	c, export, server := e.Cluster, e.export, e.nfs
	ctx := context.Background()

	t.Run("steady state", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		// A topic by kubectl, and one by Kafka's admin API (which becomes a KafkaTopic).
		c.Apply(kaastest.Topic("orders", 3, ""))
		e.WaitJSONPath(2*time.Minute, ns, "kafkatopic", "orders", `.status.conditions[?(@.type=="Ready")].status`, "True")
		admin := adminClient(t, e.seeds())
		created, err := admin.CreateTopics(ctx, 4, 1, nil, "Payments_v1")
		if err != nil {
			t.Fatal(err)
		}
		if r := created["Payments_v1"]; r.Err != nil {
			t.Fatalf("CreateTopics Payments_v1: %v (%s)", r.Err, r.ErrMessage)
		}
		resource := strings.TrimSpace(e.MustKubectl("-n", ns, "get", "kafkatopics", "-o", `jsonpath={.items[?(@.spec.topicName=="Payments_v1")].metadata.name}`))
		if resource == "" {
			t.Fatal("CreateTopics made no KafkaTopic")
		}
		// It is owned by its KafkaCluster (garbage-collected with it); one made with kubectl is not.
		if owner, uid := e.JSONPath(ns, "kafkatopic", resource, `.metadata.ownerReferences[?(@.kind=="KafkaCluster")].uid`), e.JSONPath(ns, "kafkacluster", "kc", ".metadata.uid"); uid == "" || owner != uid {
			t.Errorf("KafkaTopic %s owned by %q, want KafkaCluster kc (%s)", resource, owner, uid)
		}
		if owner := e.JSONPath(ns, "kafkatopic", "orders", ".metadata.ownerReferences"); owner != "" {
			t.Errorf("kubectl's KafkaTopic orders has owners %s", owner)
		}
		e.WaitJSONPath(time.Minute, ns, "kafkatopic", resource, `.status.conditions[?(@.type=="Ready")].status`, "True")
		if again, _ := admin.CreateTopics(ctx, 1, 1, nil, "Payments_v1"); again["Payments_v1"].Err == nil {
			t.Error("creating Payments_v1 twice succeeded")
		}

		orders, payments := newLedger("orders", "steady"), newLedger("Payments_v1", "steady")
		cl := producer(t, e.seeds())
		orders.send(ctx, cl, 3000)
		payments.send(ctx, cl, 3000)
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, acked, failed := orders.counts(); acked != 3000 || failed != 0 {
			t.Fatalf("orders: %d acknowledged, failures %v", acked, orders.failed)
		}
		if _, acked, failed := payments.counts(); acked != 3000 || failed != 0 {
			t.Fatalf("payments: %d acknowledged, failures %v", acked, payments.failed)
		}
		verify(t, e.seeds(), orders)
		verify(t, e.seeds(), payments)
		// A consumer group bootstrapped as a user's would be: from the cluster's status, the
		// bootstrap Service (a ClusterIP, through the harness' service proxy).
		bootstrap := e.JSONPath(ns, "kafkacluster", "kc", ".status.bootstrapServers")
		if bootstrap != "kc-bootstrap."+ns+".svc:9092" {
			t.Fatalf("status.bootstrapServers = %q", bootstrap)
		}
		consumeAsGroup(t, []string{bootstrap}, "orders", "steady-group", 3000)
	})

	t.Run("kafkaclusterassignments shows the live assignment", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		e.Eventually(time.Minute, "the mirror to match assignment.json", func() (bool, error) {
			a, err := readAssignment(export)
			if err != nil {
				return false, err
			}
			version := e.JSONPath(ns, "kafkaclusterassignments", "kc", ".spec.assignmentVersion")
			count := e.JSONPath(ns, "kafkaclusterassignments", "kc", ".spec.partitionCount")
			return version == strconv.FormatInt(a.AssignmentVersion, 10) && count == strconv.Itoa(len(a.Partitions)),
				fmt.Errorf("mirror v%s with %s partitions, file v%d with %d", version, count, a.AssignmentVersion, len(a.Partitions))
		})
		// The operator follows the mirror into the KafkaCluster's status.
		e.Eventually(time.Minute, "KafkaCluster status naming the controller", func() (bool, error) {
			a, err := readAssignment(export)
			if err != nil {
				return false, err
			}
			controller := e.JSONPath(ns, "kafkacluster", "kc", ".status.currentController")
			version := e.JSONPath(ns, "kafkacluster", "kc", ".status.assignmentVersion")
			return controller == fmt.Sprintf("kc-%d", a.ControllerID) && version == strconv.FormatInt(a.AssignmentVersion, 10),
				fmt.Errorf("status says %s at v%s, the file broker %d at v%d", controller, version, a.ControllerID, a.AssignmentVersion)
		})
		out := e.MustKubectl("-n", ns, "get", "kafkaclusterassignments")
		if !strings.Contains(out, "kc") || !strings.Contains(out, "PARTITIONS") {
			t.Errorf("kubectl get kafkaclusterassignments:\n%s", out)
		}
		t.Logf("\n%s", out)

		// The controller broker publishes what the heartbeats report: each topic's size and end
		// offset, each broker's partitions led, the groups' lag (a topic is rewritten at most once
		// a minute, hence the wait).
		e.Eventually(3*time.Minute, "the kubectl views of topics, brokers and groups", func() (bool, error) {
			a, err := readAssignment(export)
			if err != nil {
				return false, err
			}
			end := e.JSONPath(ns, "kafkatopic", "orders", ".status.logEndOffset")
			reported := e.JSONPath(ns, "kafkatopic", "orders", ".status.partitionsReported")
			size, _ := strconv.Atoi(e.JSONPath(ns, "kafkatopic", "orders", ".status.sizeBytes"))
			led := strings.Fields(e.JSONPath(ns, "kafkacluster", "kc", ".status.brokers[*].partitionsLed"))
			total := 0
			for _, n := range led {
				count, _ := strconv.Atoi(n)
				total += count
			}
			lag := e.JSONPath(ns, "kafkacluster", "kc", `.status.consumerGroups[?(@.name=="steady-group")].lag`)
			return end == "3000" && reported == "3" && size > 3000 && len(led) == 3 && total == len(a.Partitions) && lag == "0",
				fmt.Errorf("orders: end offset %q over %q partitions, %d bytes; partitions led %v of %d; steady-group lag %q",
					end, reported, size, led, len(a.Partitions), lag)
		})
		// Two field managers share the status; neither's apply removed the other's fields.
		managers := e.JSONPath(ns, "kafkacluster", "kc", ".metadata.managedFields[*].manager")
		if !strings.Contains(managers, "kaas-controller") || !strings.Contains(managers, "kaas-operator") {
			t.Errorf("KafkaCluster kc managed by %q, want kaas-controller and kaas-operator", managers)
		}
		if ready, servers := e.JSONPath(ns, "kafkacluster", "kc", ".status.readyBrokers"), e.JSONPath(ns, "kafkacluster", "kc", ".status.bootstrapServers"); ready != "3" || servers == "" {
			t.Errorf("the operator's status fields: readyBrokers %q, bootstrapServers %q", ready, servers)
		}
		if id := e.JSONPath(ns, "kafkatopic", "orders", ".status.topicId"); id == "" {
			t.Error("the volume agent's topicId is gone from KafkaTopic orders")
		}
		topics := e.MustKubectl("-n", ns, "get", "kafkatopics")
		clusters := e.MustKubectl("-n", ns, "get", "kafkaclusters")
		if !strings.Contains(topics, "SIZE") || !strings.Contains(topics, "END OFFSET") || !strings.Contains(topics, "3000") {
			t.Errorf("kubectl get kafkatopics:\n%s", topics)
		}
		if !strings.Contains(clusters, "IN B/S") || !strings.Contains(clusters, "OUT B/S") {
			t.Errorf("kubectl get kafkaclusters:\n%s", clusters)
		}
		t.Logf("\n%s\n%s", topics, clusters)
	})

	t.Run("broker kill -9", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		e.whileProducing(t, "kill", func() {
			leader, _ := e.leaderOf(t, "orders", 0)
			pod := fmt.Sprintf("kc-%d", leader)
			restarts := e.Pod(ns, pod).Status.ContainerStatuses[0].RestartCount
			e.Signal(ns, pod, "", syscall.SIGKILL)
			// The kubelet restarts the container at once; whether the partition moved meanwhile
			// or the new incarnation took it over again, it must serve every acknowledged record.
			e.Eventually(time.Minute, pod+" restarted and ready", func() (bool, error) {
				p := e.Pod(ns, pod)
				return harness.IsReady(p) && p.Status.ContainerStatuses[0].RestartCount > restarts, nil
			})
		})
		e.waitBrokersReady(2 * time.Minute)
	})

	t.Run("zombie leader", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		e.whileProducing(t, "zombie", func() {
			leader, epoch := e.leaderOf(t, "orders", 1)
			pod := fmt.Sprintf("kc-%d", leader)
			e.Signal(ns, pod, "", syscall.SIGSTOP)
			moved := e.waitMoved(time.Minute, "orders", 1, leader, epoch)
			if moved == leader {
				t.Errorf("orders/1 stayed on the stopped broker %d", leader)
			}
			time.Sleep(time.Second)
			// The zombie wakes up believing it leads; whatever it does must not be served.
			e.Signal(ns, pod, "", syscall.SIGCONT)
			time.Sleep(time.Second)
		})
		e.waitBrokersReady(2 * time.Minute)
	})

	t.Run("transaction coordinator killed mid-commit", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		e.transactionOutlivesItsCoordinator(t)
		e.waitBrokersReady(2 * time.Minute)
	})

	t.Run("controller killed", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		holder := e.JSONPath(ns, "lease", "kc-controller", ".spec.holderIdentity")
		transitions, _ := strconv.Atoi(e.JSONPath(ns, "lease", "kc-controller", ".spec.leaseTransitions"))
		if holder == "" {
			t.Fatal("no controller Lease holder")
		}
		e.Signal(ns, holder, "", syscall.SIGKILL)
		e.Eventually(time.Minute, "a new controller epoch", func() (bool, error) {
			now, _ := strconv.Atoi(e.JSONPath(ns, "lease", "kc-controller", ".spec.leaseTransitions"))
			a, err := readAssignment(export)
			if err != nil {
				return false, err
			}
			return now > transitions && a.ControllerEpoch == int64(now),
				fmt.Errorf("lease transitions %d → %d, assignment epoch %d", transitions, now, a.ControllerEpoch)
		})
		e.waitBrokersReady(2 * time.Minute)
		produceAndVerify(t, e.seeds(), newLedger("orders", "after-controller"), 500)
	})

	t.Run("stale controller resumed", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		holder := e.JSONPath(ns, "lease", "kc-controller", ".spec.holderIdentity")
		transitions, _ := strconv.Atoi(e.JSONPath(ns, "lease", "kc-controller", ".spec.leaseTransitions"))
		e.Signal(ns, holder, "", syscall.SIGSTOP)
		var epoch int64
		e.Eventually(time.Minute, "a new controller while the old one is paused", func() (bool, error) {
			now, _ := strconv.Atoi(e.JSONPath(ns, "lease", "kc-controller", ".spec.leaseTransitions"))
			a, err := readAssignment(export)
			epoch = a.ControllerEpoch
			return err == nil && now > transitions && a.ControllerEpoch == int64(now), fmt.Errorf("lease transitions %d → %d", transitions, now)
		})
		// The paused controller wakes up still believing it controls: whatever it tries, the
		// assignment never goes back to its epoch.
		e.Signal(ns, holder, "", syscall.SIGCONT)
		deadline := time.Now().Add(6 * time.Second)
		for time.Now().Before(deadline) {
			if a, err := readAssignment(export); err == nil && a.ControllerEpoch < epoch {
				t.Fatalf("assignment.json went back to controller epoch %d after epoch %d", a.ControllerEpoch, epoch)
			}
			time.Sleep(50 * time.Millisecond)
		}
		e.Eventually(time.Minute, "the resumed broker to step down", func() (bool, error) {
			logs := e.PodLogs(ns, holder, "kaas")
			return strings.Contains(logs, "stepping down as controller") || strings.Contains(logs, "no longer the controller") ||
				strings.Contains(logs, "lost the controller lease"), nil
		})
		e.waitBrokersReady(2 * time.Minute)
		produceAndVerify(t, e.seeds(), newLedger("orders", "after-stale-controller"), 300)
	})

	t.Run("SIGTERM drain", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		var leader int
		l := e.whileProducing(t, "drain", func() {
			leader, _ = e.leaderOf(t, "orders", 2)
			e.MustKubectl("-n", ns, "delete", "pod", fmt.Sprintf("kc-%d", leader), "--wait=true", "--timeout=90s")
			e.waitBrokersReady(2 * time.Minute)
		})
		if _, _, failed := l.counts(); failed > 0 {
			t.Errorf("a drain gave the producer non-retriable errors: %v", l.failed[:min(5, len(l.failed))])
		}
		logs := e.PodLogs(ns, fmt.Sprintf("kc-%d", leader), "kaas")
		if !strings.Contains(logs, "drained: every partition moved away") {
			t.Errorf("broker %d did not drain before exiting:\n%s", leader, tail(logs, 40))
		}
	})

	// An operator upgrade while a producer writes: the new manager adopts the running cluster,
	// no broker restarts, and every acknowledged record is read back.
	t.Run("an operator upgrade under traffic restarts no broker and loses no record", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		before, generation := kaastest.BrokerPods(e.Cluster)
		l := e.whileProducing(t, "operator-upgrade", func() {
			kaastest.UpgradeOperator(e.Cluster, repoRoot(t), kaastest.NextOperatorImage)
		})
		if after, got := kaastest.BrokerPods(e.Cluster); after != before || got != generation {
			t.Errorf("brokers restarted or StatefulSet rewritten: pods %q → %q, generation %s → %s", before, after, generation, got)
		}
		if _, acked, failed := l.counts(); acked == 0 || failed > 0 {
			t.Errorf("during the upgrade: %d records acknowledged, non-retriable errors %v", acked, l.failed[:min(5, len(l.failed))])
		}
	})

	t.Run("rolling upgrade", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		l := e.whileProducing(t, "upgrade", func() {
			before := e.JSONPath(ns, "statefulset", "kc", ".status.updateRevision")
			e.MustKubectl("-n", ns, "patch", "kafkacluster", "kc", "--type=merge", "-p", `{"spec":{"version":"0.1.1"}}`)
			// One broker at a time: never fewer than two serving while the StatefulSet rolls.
			fewest := 3
			// NB: the StatefulSet's status alone can report the roll done from a stale pod
			// cache; the pods themselves must run the new image and be ready.
			e.Eventually(5*time.Minute, "every broker on 0.1.1", func() (bool, error) {
				ready, upgraded := 0, 0
				for i := range 3 {
					pod := fmt.Sprintf("kc-%d", i)
					if ok, _ := e.PodReady(ns, pod); ok {
						ready++
						if e.JSONPath(ns, "pod", pod, ".spec.containers[0].image") == "ghcr.io/kaas/kaas:0.1.1" {
							upgraded++
						}
					}
				}
				fewest = min(fewest, ready)
				updated := e.JSONPath(ns, "statefulset", "kc", ".status.updatedReplicas")
				current := e.JSONPath(ns, "statefulset", "kc", ".status.updateRevision")
				return current != before && updated == "3" && upgraded == 3, fmt.Errorf("revision %s, %s updated, %d ready, %d ready on 0.1.1", current, updated, ready, upgraded)
			})
			if fewest < 2 {
				t.Errorf("%d brokers were serving at one point of the roll; want one at a time", fewest)
			}
			for i := range 3 {
				image := e.JSONPath(ns, "pod", fmt.Sprintf("kc-%d", i), ".spec.containers[0].image")
				if image != "ghcr.io/kaas/kaas:0.1.1" {
					t.Errorf("kc-%d runs %s", i, image)
				}
			}
		})
		if _, _, failed := l.counts(); failed > 0 {
			t.Errorf("the roll gave the producer non-retriable errors: %v", l.failed[:min(5, len(l.failed))])
		}
	})

	t.Run("retention frees the space", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		c.Apply(kaastest.Topic("events", 1, `, config: {retention.ms: "2000", segment.ms: "500", segment.bytes: "1048576"}`))
		e.WaitJSONPath(time.Minute, ns, "kafkatopic", "events", `.status.conditions[?(@.type=="Ready")].status`, "True")
		l := newLedger("events", "retained")
		l.pad = 1024
		cl := producer(t, e.seeds())
		for range 6 {
			// Spread over a few time-based rolls.
			l.send(ctx, cl, 500)
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(600 * time.Millisecond)
		}
		dir := filepath.Join(export, "events", "0")
		e.Eventually(time.Minute, "expired segments deleted and no .nfs ghost left", func() (bool, error) {
			segments, err := namesWith(dir, strings.HasSuffix, ".log")
			if err != nil {
				return false, err
			}
			g := ghosts(export)
			return len(segments) <= 1 && len(g) == 0, fmt.Errorf("segments %v, ghosts %v", segments, g)
		})
		admin := adminClient(t, e.seeds())
		starts, err := admin.ListStartOffsets(ctx, "events")
		if err != nil {
			t.Fatal(err)
		}
		start, _ := starts.Lookup("events", 0)
		if start.Offset == 0 {
			t.Errorf("log start offset still 0 after retention")
		}
		// DeleteRecords moves the start further and frees the segments before it.
		ends, err := admin.ListEndOffsets(ctx, "events")
		if err != nil {
			t.Fatal(err)
		}
		end, _ := ends.Lookup("events", 0)
		deleted, err := admin.DeleteRecords(ctx, kadm.Offsets{"events": {0: {Topic: "events", Partition: 0, At: end.Offset}}})
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := deleted.Lookup("events", 0); r.Err != nil || r.LowWatermark != end.Offset {
			t.Fatalf("DeleteRecords up to %d: low watermark %d, %v", end.Offset, r.LowWatermark, r.Err)
		}
		e.Eventually(time.Minute, "segments before the new start removed, no ghosts", func() (bool, error) {
			segments, err := namesWith(dir, strings.HasSuffix, ".log")
			if err != nil {
				return false, err
			}
			g := ghosts(export)
			return len(segments) <= 1 && len(g) == 0, fmt.Errorf("segments %v, ghosts %v", segments, g)
		})
	})

	t.Run("delete and recreate", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		before := e.JSONPath(ns, "kafkatopic", "orders", ".metadata.uid")
		e.MustKubectl("-n", ns, "delete", "kafkatopic", "orders", "--wait=true", "--timeout=30s")
		// Recreated at once, racing the reclamation of the old incarnation.
		c.Apply(kaastest.Topic("orders", 2, ""))
		e.WaitJSONPath(2*time.Minute, ns, "kafkatopic", "orders", `.status.conditions[?(@.type=="Ready")].status`, "True")
		after := e.JSONPath(ns, "kafkatopic", "orders", ".metadata.uid")
		if after == before {
			t.Fatal("recreated topic has the old uid")
		}
		e.Eventually(2*time.Minute, "the old incarnation reclaimed, no ghosts", func() (bool, error) {
			left, err := namesWith(export, strings.HasPrefix, ".reclaim-")
			if err != nil {
				return false, err
			}
			g := ghosts(export)
			return len(left) == 0 && len(g) == 0, fmt.Errorf("left %v, ghosts %v", left, g)
		})
		produceAndVerify(t, e.seeds(), newLedger("orders", "fresh"), 200)
		got := readAll(t, e.seeds(), "orders")
		total := 0
		for p, records := range got {
			for o, v := range records {
				total++
				if !strings.HasPrefix(v, "fresh-") {
					t.Errorf("recreated orders/%d@%d holds %q from the old incarnation", p, o, v)
				}
			}
		}
		if total != 200 {
			t.Errorf("recreated orders holds %d records, want 200", total)
		}
	})

	t.Run("Kafka-API delete removes the KafkaTopic", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		admin := adminClient(t, e.seeds())
		deleted, err := admin.DeleteTopics(ctx, "Payments_v1")
		if err != nil {
			t.Fatal(err)
		}
		if r := deleted["Payments_v1"]; r.Err != nil {
			t.Fatalf("DeleteTopics: %v (%s)", r.Err, r.ErrMessage)
		}
		out := e.MustKubectl("-n", ns, "get", "kafkatopics", "-o", `jsonpath={.items[*].spec.topicName}`)
		if strings.Contains(out, "Payments_v1") {
			t.Errorf("KafkaTopic of Payments_v1 still there: %s", out)
		}
		e.Eventually(2*time.Minute, "Payments_v1 reclaimed", func() (bool, error) {
			_, err := os.Stat(filepath.Join(export, "Payments_v1"))
			return os.IsNotExist(err), err
		})
	})

	t.Run("EIO and ENOSPC on the leader's volume", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		c.Apply(kaastest.Topic("faulty", 2, ""))
		e.WaitJSONPath(time.Minute, ns, "kafkatopic", "faulty", `.status.conditions[?(@.type=="Ready")].status`, "True")
		// Wait for both partitions to be led, then fail partition 0's writes on its node.
		e.Eventually(time.Minute, "faulty placed", func() (bool, error) {
			a, err := readAssignment(export)
			_, ok0 := a.Partitions["faulty/0"]
			_, ok1 := a.Partitions["faulty/1"]
			return err == nil && ok0 && ok1, err
		})
		leader, _ := e.leaderOf(t, "faulty", 0)
		node := e.Pod(ns, fmt.Sprintf("kc-%d", leader)).Spec.NodeName
		for _, errno := range []string{"EIO", "ENOSPC"} {
			if _, err := server.do(fmt.Sprintf("write-error %s %s 0 faulty/0", node, errno)); err != nil {
				t.Fatal(err)
			}
			if _, err := server.do(fmt.Sprintf("fsync-error %s %s 0 faulty/0", node, errno)); err != nil {
				t.Fatal(err)
			}
			l := newLedger("faulty", "fault-"+errno)
			// Records for the failing partition give up after 10 s instead of retrying on.
			cl := producer(t, e.seeds(), kgo.RecordDeliveryTimeout(10*time.Second))
			// Partition 0 fails while the fault lasts; partition 1 (same broker or not) serves.
			if err := produceOnce(ctx, t, e.seeds(), "faulty", 0); err == nil {
				t.Errorf("%s: a write to faulty/0 was acknowledged while its volume failed", errno)
			}
			l.send(ctx, cl, 100)
			_ = cl.Flush(ctx)
			if _, acked, failed := l.counts(); acked == 0 || failed == 0 {
				t.Errorf("%s on faulty/0: %d acknowledged, %d failed; want faulty/1 served and faulty/0 refused", errno, acked, failed)
			}
			if _, err := server.do("clear"); err != nil {
				t.Fatal(err)
			}
			// Recovered: produce until faulty/0 takes writes again.
			e.Eventually(time.Minute, "faulty/0 writable after the fault cleared", func() (bool, error) {
				err := produceOnce(ctx, t, e.seeds(), "faulty", 0)
				return err == nil, err
			})
			verify(t, e.seeds(), l)
		}
		e.waitBrokersReady(time.Minute)
	})

	t.Run("seeded fault campaign", func(t *testing.T) {
		e := &seedsEnv{Cluster: c.For(t), export: export, nfs: server}
		e.faultCampaign(t)
	})
}
