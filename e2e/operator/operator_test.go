package operator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

const ns = kaastest.Namespace

var clusterYAML = kaastest.Cluster(`  config: {log.retention.ms: "600000"}
`)

func TestOperator(t *testing.T) {
	root := repoRoot(t)
	c := harness.Start(t, harness.Options{Images: map[string]string{
		"ghcr.io/kaas/kaas-operator:*": harness.CargoBinary(t, "KAAS_OPERATOR_BIN", "kaas-operator"),
		"ghcr.io/kaas/kaas:*":          harness.CargoBinary(t, "KAAS_BIN", "kaas"),
	}})
	volume := c.VolumeDir("shared")

	// Install exactly as a user would: CRDs, RBAC and the operator Deployment from config/.
	c.MustKubectl("apply", "-k", filepath.Join(root, "config", "default"))
	for _, crd := range []string{"kafkaclusters", "kafkatopics", "kafkaclusterassignments"} {
		c.MustKubectl("wait", "--for=condition=Established", "crd/"+crd+".kaas.dev", "--timeout=60s")
	}
	c.Apply(clusterYAML)

	t.Run("cluster objects", func(t *testing.T) {
		c := c.For(t)
		c.WaitJSONPath(3*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
		if got := c.JSONPath(ns, "kafkacluster", "kc", ".status.readyBrokers"); got != "3" {
			t.Fatalf("readyBrokers = %q", got)
		}
		if got := c.JSONPath(ns, "kafkacluster", "kc", ".status.bootstrapServers"); got != "kc-bootstrap.demo.svc:9092" {
			t.Fatalf("bootstrapServers = %q", got)
		}
		if got := c.JSONPath(ns, "statefulset", "kc", `.spec.template.spec.containers[0].env[?(@.name=="MY_POD_NAME")].valueFrom.fieldRef.fieldPath`); got != "metadata.name" {
			t.Fatalf("MY_POD_NAME from %q", got)
		}
		if got := c.JSONPath(ns, "statefulset", "kc", ".spec.template.spec.volumes[0].persistentVolumeClaim.claimName"); got != "shared" {
			t.Fatalf("claim %q", got)
		}
		if got := c.JSONPath(ns, "service", "kc-brokers", ".spec.clusterIP"); got != "None" {
			t.Fatalf("headless clusterIP %q", got)
		}
		if got := c.JSONPath(ns, "poddisruptionbudget", "kc", ".spec.maxUnavailable"); got != "1" {
			t.Fatalf("pdb maxUnavailable %q", got)
		}
		if got := c.JSONPath(ns, "statefulset", "kc", ".metadata.ownerReferences[0].kind"); got != "KafkaCluster" {
			t.Fatalf("owner %q", got)
		}
		// The brokers' RBAC allows exactly what brokers use.
		sa := "system:serviceaccount:demo:kc-broker"
		for _, allowed := range [][]string{{"patch", "leases"}, {"create", "kafkatopics"}, {"watch", "endpointslices.discovery.k8s.io"}, {"patch", "kafkaclusterassignments"}} {
			if out, _ := c.Kubectl("auth", "can-i", "-n", ns, "--as", sa, allowed[0], allowed[1]); strings.TrimSpace(out) != "yes" {
				t.Errorf("broker cannot %v: %s", allowed, out)
			}
		}
		for _, denied := range [][]string{{"delete", "leases"}, {"get", "secrets"}, {"patch", "kafkaclusters"}} {
			if out, _ := c.Kubectl("auth", "can-i", "-n", ns, "--as", sa, denied[0], denied[1]); strings.TrimSpace(out) != "no" {
				t.Errorf("broker may %v: %s", denied, out)
			}
		}
	})

	t.Run("a restarted operator adopts without restarting brokers", func(t *testing.T) {
		c := c.For(t)
		uids := func() string {
			out, _ := c.Kubectl("-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=broker", "-o", "jsonpath={.items[*].metadata.uid}")
			return strings.TrimSpace(out)
		}
		before, generation := uids(), c.JSONPath(ns, "statefulset", "kc", ".metadata.generation")
		if strings.Count(before, " ") != 2 {
			t.Fatalf("broker pods: %q", before)
		}
		old := strings.TrimSpace(c.MustKubectl("-n", "kaas-system", "get", "pods", "-l", "app.kubernetes.io/name=kaas-operator", "-o", "jsonpath={.items[0].metadata.name}"))
		c.MustKubectl("-n", "kaas-system", "delete", "pod", old, "--wait=true", "--timeout=60s")
		c.Eventually(time.Minute, "a new operator pod ready", func() (bool, error) {
			out, err := c.Kubectl("-n", "kaas-system", "get", "pods", "-l", "app.kubernetes.io/name=kaas-operator", "-o", `jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}`)
			return err == nil && strings.TrimSpace(out) == "True", fmt.Errorf("ready: %q", out)
		})
		// Its first reconcile of every cluster happens at start; give it time to act.
		time.Sleep(10 * time.Second)
		c.WaitJSONPath(time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
		if after := uids(); after != before {
			t.Errorf("brokers restarted: pods %q → %q", before, after)
		}
		if got := c.JSONPath(ns, "statefulset", "kc", ".metadata.generation"); got != generation {
			t.Errorf("StatefulSet rewritten: generation %s → %s", generation, got)
		}
	})

	var firstUID string
	t.Run("topic directory with identity", func(t *testing.T) {
		c := c.For(t)
		c.Apply(kaastest.Topic("orders", 3, ", config: {retention.ms: \"1000\"}"))
		c.WaitJSONPath(2*time.Minute, ns, "kafkatopic", "orders", `.status.conditions[?(@.type=="Ready")].status`, "True")
		firstUID = c.JSONPath(ns, "kafkatopic", "orders", ".metadata.uid")
		if got := c.JSONPath(ns, "kafkatopic", "orders", ".status.topicId"); got != firstUID {
			t.Fatalf("topicId %q, uid %q", got, firstUID)
		}
		stamp, err := os.ReadFile(filepath.Join(volume, "orders", "topic.id"))
		if err != nil || strings.TrimSpace(string(stamp)) != firstUID {
			t.Fatalf("stamp %q, %v; want %s", stamp, err, firstUID)
		}
		checkTopicFile(t, volume, "orders", 3, firstUID)
		// Partitions grow.
		c.MustKubectl("-n", ns, "patch", "kafkatopic", "orders", "--type=merge", "-p", `{"spec":{"partitions":5}}`)
		c.Eventually(time.Minute, "topic.json with 5 partitions", func() (bool, error) {
			return readTopicFile(volume, "orders").Partitions == 5, nil
		})
		c.WaitJSONPath(time.Minute, ns, "kafkatopic", "orders", ".status.partitions", "5")
	})

	t.Run("admission rejects bad specs", func(t *testing.T) {
		c := c.For(t)
		for _, tc := range []struct{ manifest, says string }{
			{kaastest.Topic("orders", 2, ""), "partitions may grow but never shrink"},
			{kaastest.Topic("zero", 0, ""), "should be greater than or equal to 1"},
			{kaastest.Topic("internal", 1, ", topicName: __offsets"), "reserved for kaas"},
			{kaastest.Topic("slash", 1, ", topicName: a/b"), "topicName"},
			{"apiVersion: kaas.dev/v1alpha1\nkind: KafkaCluster\nmetadata: {name: both, namespace: demo}\nspec: {replicas: 1, version: 0.1.0, storage: {existingClaim: x, size: 1Gi}}\n", "set either existingClaim or size"},
			{"apiVersion: kaas.dev/v1alpha1\nkind: KafkaCluster\nmetadata: {name: fence, namespace: demo}\nspec: {replicas: 1, version: 0.1.0, storage: {existingClaim: x}, timeouts: {fenceTimeoutMs: 9000, sessionTimeoutMs: 10000}}\n", "sessionTimeoutMs must exceed fenceTimeoutMs"},
		} {
			out, err := c.KubectlStdin(tc.manifest, "apply", "-f", "-")
			if err == nil || !strings.Contains(out, tc.says) {
				t.Errorf("want rejection saying %q, got err=%v: %s", tc.says, err, out)
			}
		}
		// Config values are checked with Kafka's rules by the operator, into status.
		c.Apply(kaastest.Topic("badconfig", 1, ", config: {retention.ms: soon}"))
		c.WaitJSONPath(time.Minute, ns, "kafkatopic", "badconfig", `.status.conditions[?(@.type=="Ready")].reason`, "InvalidSpec")
		msg := c.JSONPath(ns, "kafkatopic", "badconfig", `.status.conditions[?(@.type=="Ready")].message`)
		if !strings.Contains(msg, `"retention.ms": value "soon" is not a whole number`) {
			t.Errorf("message %q", msg)
		}
		if _, err := os.Stat(filepath.Join(volume, "badconfig")); !os.IsNotExist(err) {
			t.Errorf("a refused topic got a directory: %v", err)
		}
	})

	t.Run("delete reclaims, recreate is fresh", func(t *testing.T) {
		c := c.For(t)
		// The first incarnation is served: its partitions have leaders, whose take-over
		// created their directories.
		c.Eventually(time.Minute, "orders/0 taken over by a broker", func() (bool, error) {
			_, err := os.Stat(filepath.Join(volume, "orders", "0"))
			return err == nil, err
		})
		c.MustKubectl("-n", ns, "delete", "kafkatopic", "orders", "--wait=true", "--timeout=30s")
		c.Eventually(time.Minute, "orders reclaimed", func() (bool, error) {
			entries, err := os.ReadDir(volume)
			if err != nil {
				return false, err
			}
			var left []string
			for _, e := range entries {
				if e.Name() == "orders" || strings.HasPrefix(e.Name(), ".reclaim-") {
					left = append(left, e.Name())
				}
			}
			return len(left) == 0, fmt.Errorf("left: %v", left)
		})
		// The agent's metrics count the reclamation and show nothing pending.
		agent := strings.TrimSpace(c.MustKubectl("-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=volume-agent", "-o", "jsonpath={.items[0].metadata.name}"))
		c.Eventually(time.Minute, "reclamation in the agent's metrics", func() (bool, error) {
			resp, err := http.Get("http://" + c.PodAddr(ns, agent, 9096) + "/metrics")
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			text := string(body)
			ok := err == nil && !strings.Contains(text, "kaas_reclaim_renamed_total 0") && strings.Contains(text, "kaas_reclaim_renamed_total") &&
				strings.Contains(text, "kaas_reclaim_pending_directories 0") && strings.Contains(text, "kaas_reclaim_waiting_directories 0")
			return ok, fmt.Errorf("metrics: %s", text)
		})
		c.Apply(kaastest.Topic("orders", 1, ""))
		c.WaitJSONPath(time.Minute, ns, "kafkatopic", "orders", `.status.conditions[?(@.type=="Ready")].status`, "True")
		uid := c.JSONPath(ns, "kafkatopic", "orders", ".metadata.uid")
		if uid == firstUID {
			t.Fatal("recreated topic has the old uid")
		}
		checkTopicFile(t, volume, "orders", 1, uid)
		// The new incarnation's leaders start empty logs (no client wrote to it yet).
		logs, _ := filepath.Glob(filepath.Join(volume, "orders", "*", "*.log"))
		for _, log := range logs {
			if info, err := os.Stat(log); err == nil && info.Size() > 0 {
				t.Errorf("recreated topic has data in %s (%d bytes)", log, info.Size())
			}
		}
	})

	t.Run("operator restarted mid-reconcile converges", func(t *testing.T) {
		c := c.For(t)
		pod := strings.TrimSpace(c.MustKubectl("-n", "kaas-system", "get", "pods", "-l", "app.kubernetes.io/name=kaas-operator", "-o", "jsonpath={.items[0].metadata.name}"))
		agent := strings.TrimSpace(c.MustKubectl("-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=volume-agent", "-o", "jsonpath={.items[0].metadata.name}"))
		// Change the spec and a topic, and kill both while they work on it.
		c.MustKubectl("-n", ns, "patch", "kafkacluster", "kc", "--type=merge", "-p", `{"spec":{"replicas":2,"config":{"log.retention.ms":"700000"}}}`)
		c.Apply(kaastest.Topic("payments", 2, ""))
		c.Signal("kaas-system", pod, "", syscall.SIGKILL)
		c.Signal(ns, agent, "", syscall.SIGKILL)
		c.WaitJSONPath(3*time.Minute, ns, "statefulset", "kc", `.spec.template.spec.containers[0].env[?(@.name=="KAAS_LOG_RETENTION_MS")].value`, "700000")
		c.WaitJSONPath(3*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
		c.WaitJSONPath(time.Minute, ns, "kafkacluster", "kc", ".status.readyBrokers", "2")
		// Scale-down removed kc-2 with SIGTERM: it drained (its partitions moved) before exiting.
		if logs := c.PodLogs(ns, "kc-2", "kaas"); !strings.Contains(logs, "draining: asking the controller to move partitions away") {
			t.Errorf("kc-2 was not drained on scale-down:\n%s", logs)
		}
		c.WaitJSONPath(2*time.Minute, ns, "kafkatopic", "payments", `.status.conditions[?(@.type=="Ready")].status`, "True")
		checkTopicFile(t, volume, "payments", 2, c.JSONPath(ns, "kafkatopic", "payments", ".metadata.uid"))
	})

	t.Run("status says what keeps brokers from starting", func(t *testing.T) {
		c := c.For(t)
		// A claim the operator creates with a StorageClass that does not exist stays Pending:
		// the status and an event must say so, naming the class, not only "0/1 ready".
		c.Apply(`
apiVersion: kaas.dev/v1alpha1
kind: KafkaCluster
metadata: {name: nostore, namespace: ` + ns + `}
spec:
  replicas: 1
  version: 0.1.0
  storage: {size: 1Gi, storageClassName: no-such-class}
  listener: {advertise: PodIp}
`)
		defer c.Kubectl("-n", ns, "delete", "kafkacluster", "nostore", "--wait=false")
		c.WaitJSONPath(2*time.Minute, ns, "kafkacluster", "nostore", `.status.conditions[?(@.type=="Degraded")].reason`, "StorageNotBound")
		msg := c.JSONPath(ns, "kafkacluster", "nostore", `.status.conditions[?(@.type=="Degraded")].message`)
		if !strings.Contains(msg, `StorageClass "no-such-class" does not exist`) {
			t.Fatalf("Degraded message %q does not name the missing StorageClass", msg)
		}
		if got := c.JSONPath(ns, "kafkacluster", "nostore", `.status.conditions[?(@.type=="Ready")].reason`); got != "StorageNotBound" {
			t.Fatalf("Ready reason %q", got)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			out, _ := c.Kubectl("-n", ns, "get", "events", "--field-selector", "involvedObject.kind=KafkaCluster,involvedObject.name=nostore", "-o", "jsonpath={.items[*].reason}")
			if strings.Contains(out, "StorageNotBound") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no StorageNotBound event on kafkacluster/nostore; events: %q", out)
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("unsupported broker version is refused", func(t *testing.T) {
		c := c.For(t)
		image := c.JSONPath(ns, "statefulset", "kc", ".spec.template.spec.containers[0].image")
		c.MustKubectl("-n", ns, "patch", "kafkacluster", "kc", "--type=merge", "-p", `{"spec":{"version":"9.0.0"}}`)
		c.WaitJSONPath(time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Degraded")].reason`, "UnsupportedBrokerVersion")
		if got := c.JSONPath(ns, "statefulset", "kc", ".spec.template.spec.containers[0].image"); got != image {
			t.Fatalf("an unsupported version was rolled out: %s", got)
		}
	})
}

type topicFile struct {
	Name       string `json:"name"`
	TopicID    string `json:"topicId"`
	Partitions int    `json:"partitions"`
}

func readTopicFile(volume, topic string) topicFile {
	var f topicFile
	b, err := os.ReadFile(filepath.Join(volume, topic, "topic.json"))
	if err == nil {
		_ = json.Unmarshal(b, &f)
	}
	return f
}

func checkTopicFile(t *testing.T, volume, topic string, partitions int, uid string) {
	t.Helper()
	f := readTopicFile(volume, topic)
	if f.Name != topic || f.TopicID != uid || f.Partitions != partitions {
		t.Fatalf("topic.json of %s = %+v, want %d partitions and id %s", topic, f, partitions, uid)
	}
}
