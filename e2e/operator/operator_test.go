package operator

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"kaas/e2e/harness"
	"kaas/e2e/kaastest"
)

const ns = kaastest.Namespace

// The cluster carries a pod template a security-conscious user would write; the process kubelet
// runs these binary-mapped brokers without enforcing it (e2e/images runs the images as the
// user it names), so this checks that it reaches the StatefulSet and the brokers still start.
var clusterYAML = `
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: kaas-e2e-brokers}
value: 1000
---` + kaastest.ClusterOnClaim("shared", `  config: {log.retention.ms: "600000"}
  podTemplate:
    securityContext: {runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532}
    env: [{name: RUST_BACKTRACE, value: "1"}]
    priorityClassName: kaas-e2e-brokers
    imagePullSecrets: [{name: regcred}]
`)

func TestOperator(t *testing.T) {
	root := repoRoot(t)
	// The operator and brokers run from their images, pulled from the harness registry.
	c := harness.Start(t, kaastest.Pulled(t, harness.Options{
		// "spare" backs the claim of a cluster whose broker pods cannot be created, "unmounted"
		// one whose pods cannot mount their listener Secret, "clients" one with the operator's TLS
		// and client certificates.
		Volumes: []string{"shared", "spare", "unmounted", "clients"},
	}))
	for _, v := range []string{"shared", "spare", "unmounted", "clients"} {
		kaastest.WritableByImages(t, c.VolumeDir(v))
	}
	volume := c.VolumeDir("shared")

	// Install exactly as a user would: CRDs, RBAC and the operator Deployment from config/.
	c.MustKubectl("apply", "-k", filepath.Join(root, "config", "default"))
	for _, crd := range []string{"kafkaclusters", "kafkatopics", "kafkaclusterassignments", "kafkausers"} {
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
		for _, allowed := range [][]string{{"patch", "leases"}, {"create", "kafkatopics"}, {"watch", "endpointslices.discovery.k8s.io"}, {"patch", "kafkaclusterassignments"}, {"get", "kafkaclusters"}} {
			if out, _ := c.Kubectl("auth", "can-i", "-n", ns, "--as", sa, allowed[0], allowed[1]); strings.TrimSpace(out) != "yes" {
				t.Errorf("broker cannot %v: %s", allowed, out)
			}
		}
		for _, denied := range [][]string{{"delete", "leases"}, {"get", "secrets"}, {"patch", "kafkaclusters"}, {"list", "kafkaclusters"}} {
			if out, _ := c.Kubectl("auth", "can-i", "-n", ns, "--as", sa, denied[0], denied[1]); strings.TrimSpace(out) != "no" {
				t.Errorf("broker may %v: %s", denied, out)
			}
		}
		// What the brokers create is owned by the KafkaCluster (garbage-collected with it): the
		// controller Lease and the assignment mirror; the brokers look the cluster's uid up.
		uid := c.JSONPath(ns, "kafkacluster", "kc", ".metadata.uid")
		for _, owned := range [][2]string{{"lease", "kc-controller"}, {"kafkaclusterassignments", "kc"}} {
			c.WaitJSONPath(time.Minute, ns, owned[0], owned[1], `.metadata.ownerReferences[?(@.kind=="KafkaCluster")].uid`, uid)
		}
	})

	t.Run("the pod template and restricted defaults reach the StatefulSet and the Deployments", func(t *testing.T) {
		c := c.For(t)
		c.WaitJSONPath(3*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
		pod := ".spec.template.spec"
		for _, want := range [][3]string{
			{"statefulset", pod + ".securityContext.runAsUser", "65532"},
			{"statefulset", pod + ".securityContext.fsGroup", "65532"},
			{"statefulset", pod + ".securityContext.runAsNonRoot", "true"},
			{"statefulset", pod + ".securityContext.seccompProfile.type", "RuntimeDefault"},
			{"statefulset", pod + ".containers[0].securityContext.readOnlyRootFilesystem", "true"},
			{"statefulset", pod + ".containers[0].securityContext.allowPrivilegeEscalation", "false"},
			{"statefulset", pod + ".containers[0].securityContext.capabilities.drop[0]", "ALL"},
			{"statefulset", pod + `.containers[0].env[?(@.name=="RUST_BACKTRACE")].value`, "1"},
			// listener.bind All, the default: every address of the pod's network namespace.
			{"statefulset", pod + `.containers[0].env[?(@.name=="KAAS_LISTEN")].value`, "[::]:9092"},
			{"statefulset", pod + ".priorityClassName", "kaas-e2e-brokers"},
			{"statefulset", pod + ".imagePullSecrets[0].name", "regcred"},
			// The brokers' NetworkPolicy: the Kafka and HTTP ports open, the heartbeat
			// and inter-broker ports from brokers only.
			{"networkpolicy", ".spec.ingress[0].ports[0].port", "9092"},
			{"networkpolicy", ".spec.ingress[1].ports[0].port", "9094"},
			{"networkpolicy", ".spec.ingress[1].ports[1].port", "9091"},
			{"networkpolicy", ".spec.ingress[1].from[0].podSelector.matchLabels.app\\.kubernetes\\.io/component", "broker"},
			{"networkpolicy", ".metadata.ownerReferences[0].kind", "KafkaCluster"},
			// The volume agent writes the same volume: the brokers' user and groups.
			{"deployment/kc-volume-agent", pod + ".securityContext.runAsUser", "65532"},
			{"deployment/kc-volume-agent", pod + ".containers[0].securityContext.readOnlyRootFilesystem", "true"},
		} {
			kind, name, _ := strings.Cut(want[0], "/")
			if name == "" {
				name = "kc"
			}
			if got := c.JSONPath(ns, kind, name, want[1]); got != want[2] {
				t.Errorf("%s %s %s = %q, want %q", kind, name, want[1], got, want[2])
			}
		}
		// Admission resolved the priority class on the running brokers.
		if got := c.JSONPath(ns, "pod", "kc-0", ".spec.priority"); got != "1000" {
			t.Errorf("kc-0 priority %q", got)
		}
		// The operator's own Deployment, from config/.
		for path, want := range map[string]string{
			pod + ".securityContext.runAsNonRoot":                         "true",
			pod + ".containers[0].securityContext.capabilities.drop[0]":   "ALL",
			pod + ".containers[0].securityContext.readOnlyRootFilesystem": "true",
		} {
			if got := c.JSONPath(operatorNS, "deployment", "kaas-operator", path); got != want {
				t.Errorf("operator %s = %q, want %q", path, got, want)
			}
		}
	})

	t.Run("probes, metrics and the metrics Service", func(t *testing.T) {
		c := c.For(t)
		managersReady(c)
		holder, _ := leaseHolder(c)
		pods := managerPods(c)
		for _, pod := range pods {
			addr := c.PodAddr(operatorNS, pod, 9096)
			for _, path := range []string{"/healthz", "/readyz"} {
				if code, body := httpGet(addr, path); code != http.StatusOK {
					t.Errorf("%s %s: %d %s", pod, path, code, body)
				}
			}
			leads := "0"
			if pod == holder {
				leads = "1"
			}
			c.Eventually(time.Minute, pod+" leader gauge "+leads, func() (bool, error) {
				_, text := httpGet(addr, "/metrics")
				return strings.Contains(text, "kaas_operator_leader "+leads+"\n"), fmt.Errorf("metrics: %s", text)
			})
			_, text := httpGet(addr, "/metrics")
			reconciled := strings.Contains(text, `kaas_operator_reconciles_total{controller="kafkacluster"}`)
			if reconciled != (pod == holder) {
				t.Errorf("%s (holder %s) reconciled=%v:\n%s", pod, holder, reconciled, text)
			}
			if pod == holder && !strings.Contains(text, `kaas_operator_reconcile_duration_seconds_count{controller="kafkacluster"}`) {
				t.Errorf("no reconcile durations:\n%s", text)
			}
			if pod == holder && !strings.Contains(text, `kaas_operator_reconciles_in_flight{controller="kafkacluster"}`) {
				t.Errorf("no reconciles in flight:\n%s", text)
			}
			if pod == holder {
				// The work queue had the cluster in it (its creation) and drains once it is reconciled.
				c.Eventually(time.Minute, "an empty work queue", func() (bool, error) {
					_, text := httpGet(addr, "/metrics")
					return strings.Contains(text, "kaas_operator_work_queue_depth{controller=\"kafkacluster\"} 0\n"), fmt.Errorf("metrics: %s", text)
				})
			}
			// Only the holder runs the controller, whose cache the readiness gauges count.
			if counted := strings.Contains(text, `kaas_operator_resources{kind="KafkaCluster",ready="true"}`); counted != (pod == holder) {
				t.Errorf("%s (holder %s) counts KafkaClusters by readiness=%v:\n%s", pod, holder, counted, text)
			}
		}
		// The Service selects both replicas (each scraped; the gauge tells the holder).
		c.Eventually(time.Minute, "two endpoints behind kaas-operator-metrics", func() (bool, error) {
			out, err := c.Kubectl("-n", operatorNS, "get", "endpointslices", "-l", "kubernetes.io/service-name=kaas-operator-metrics", "-o", "jsonpath={.items[*].endpoints[*].addresses[0]}")
			return err == nil && len(strings.Fields(out)) == 2, fmt.Errorf("endpoints %q: %v", out, err)
		})
		// The volume agent's Lease is held, and owned by its cluster (garbage-collected with it).
		if got := c.JSONPath(ns, "lease", "kc-volume-agent", ".metadata.ownerReferences[0].kind"); got != "KafkaCluster" {
			t.Errorf("agent lease owner %q", got)
		}
	})

	t.Run("leader election: a killed holder's lease moves to a live replica, which adopts without restarting brokers", func(t *testing.T) {
		c := c.For(t)
		before, generation := kaastest.BrokerPods(c)
		if strings.Count(before, " ") != 2 {
			t.Fatalf("broker pods: %q", before)
		}
		managersReady(c)
		holder, transitions := leaseHolder(c)
		killed := leaseIdentity(c)
		c.Signal(operatorNS, holder, "", syscall.SIGKILL)
		// A change only a leader reconciles: the volume agent's Deployment is gone.
		c.MustKubectl("-n", ns, "delete", "deployment", "kc-volume-agent", "--wait=false")
		// NB: the kubelet restarts the killed container in the same pod while the standby waits
		// out the lease; either may win it (identities are "<pod>_<random>", so the restarted
		// process is a new candidate, not the dead holder). What matters is that a live
		// process holds it and acts.
		var leader string
		c.Eventually(time.Minute, "a live replica holds the lease", func() (bool, error) {
			identity := leaseIdentity(c)
			leader, _, _ = strings.Cut(identity, "_")
			n := c.JSONPath(operatorNS, "lease", "kaas-operator", ".spec.leaseTransitions")
			return identity != "" && identity != killed && n != transitions, fmt.Errorf("holder %q, transitions %s (was %s)", identity, n, transitions)
		})
		c.Eventually(time.Minute, "the new leader recreated the volume agent", func() (bool, error) {
			out, err := c.Kubectl("-n", ns, "get", "deployment", "kc-volume-agent", "-o", "jsonpath={.status.readyReplicas}")
			return err == nil && strings.TrimSpace(out) == "1", fmt.Errorf("ready agents %q: %v", out, err)
		})
		c.Eventually(time.Minute, "the new leader reconciled kc", func() (bool, error) {
			_, text := httpGet(c.PodAddr(operatorNS, leader, 9096), "/metrics")
			return strings.Contains(text, "kaas_operator_leader 1\n") && strings.Contains(text, `kaas_operator_reconciles_total{controller="kafkacluster"}`), fmt.Errorf("metrics: %s", text)
		})
		c.WaitJSONPath(time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
		if after, got := kaastest.BrokerPods(c); after != before || got != generation {
			t.Errorf("brokers restarted or StatefulSet rewritten: pods %q → %q, generation %s → %s", before, after, generation, got)
		}
		// Both replicas run again; only the holder acts.
		managersReady(c)
		for _, pod := range managerPods(c) {
			want := "kaas_operator_leader 0\n"
			if pod == leader {
				want = "kaas_operator_leader 1\n"
			}
			c.Eventually(time.Minute, pod+" reports its role", func() (bool, error) {
				_, text := httpGet(c.PodAddr(operatorNS, pod, 9096), "/metrics")
				return strings.Contains(text, want), fmt.Errorf("want %q in: %s", want, text)
			})
		}
	})

	t.Run("an operator rollout to a new image and re-applied CRDs restart no broker", func(t *testing.T) {
		c := c.For(t)
		before, generation := kaastest.BrokerPods(c)
		kaastest.UpgradeOperator(c, root, kaastest.NextOperatorImage)
		if after, got := kaastest.BrokerPods(c); after != before || got != generation {
			t.Errorf("brokers restarted or StatefulSet rewritten: pods %q → %q, generation %s → %s", before, after, generation, got)
		}
		managersReady(c)
	})

	t.Run("networkPolicyPeers narrow the Kafka port and restart no broker", func(t *testing.T) {
		c := c.For(t)
		before, generation := kaastest.BrokerPods(c)
		c.MustKubectl("-n", ns, "patch", "kafkacluster", "kc", "--type=merge", "-p",
			`{"spec":{"listener":{"networkPolicyPeers":[{"ipBlock":{"cidr":"10.20.0.0/16"}}]}}}`)
		c.WaitJSONPath(time.Minute, ns, "networkpolicy", "kc", ".spec.ingress[2].from[0].ipBlock.cidr", "10.20.0.0/16")
		if got := c.JSONPath(ns, "networkpolicy", "kc", ".spec.ingress[2].ports[0].port"); got != "9092" {
			t.Errorf("the peers' rule opens port %q", got)
		}
		if got := c.JSONPath(ns, "networkpolicy", "kc", ".spec.ingress[0].ports[*].port"); got != "9095" {
			t.Errorf("the open rule has ports %q, want the HTTP port only", got)
		}
		c.MustKubectl("-n", ns, "patch", "kafkacluster", "kc", "--type=json", "-p", `[{"op":"remove","path":"/spec/listener/networkPolicyPeers"}]`)
		c.WaitJSONPath(time.Minute, ns, "networkpolicy", "kc", ".spec.ingress[0].ports[0].port", "9092")
		if after, got := kaastest.BrokerPods(c); after != before || got != generation {
			t.Errorf("brokers restarted or StatefulSet rewritten: pods %q → %q, generation %s → %s", before, after, generation, got)
		}
	})

	var firstUID string
	t.Run("topic directory with identity", func(t *testing.T) {
		c := c.For(t)
		c.Apply(kaastest.Topic("orders", 3, ", config: {retention.ms: \"1000\"}"))
		c.WaitJSONPath(2*time.Minute, ns, "kafkatopic", "orders", `.status.conditions[?(@.type=="Ready")].status`, "True")
		c.WaitJSONPath(time.Minute, ns, "kafkatopic", "orders", `.status.conditions[?(@.type=="Reconciled")].status`, "True")
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

	t.Run("a second volume agent stands by and does not act", func(t *testing.T) {
		c := c.For(t)
		// A second agent of the same cluster, as a node partition could leave running: it
		// must wait for the agent Lease and never reconcile while the holder renews it.
		image := c.JSONPath(ns, "deployment", "kc-volume-agent", ".spec.template.spec.containers[0].image")
		c.Apply(`
apiVersion: v1
kind: Pod
metadata: {name: second-agent, namespace: ` + ns + `}
spec:
  serviceAccountName: kc-volume-agent
  containers:
  - name: agent
    image: ` + image + `
    command: [/kaas-operator, volume-agent]
    env:
    - {name: MY_POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: KAAS_METRICS_LISTEN, value: "$(MY_POD_IP):9096"}
    - {name: KAAS_NAMESPACE, value: ` + ns + `}
    - {name: KAAS_CLUSTER, value: kc}
    - {name: KAAS_DATA_DIR, value: /data}
    readinessProbe: {httpGet: {path: /readyz, port: 9096}, periodSeconds: 1}
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: shared}}]
`)
		defer c.Kubectl("-n", ns, "delete", "pod", "second-agent", "--wait=false")
		c.WaitPodReady(ns, "second-agent", time.Minute)
		c.MustKubectl("-n", ns, "patch", "kafkatopic", "orders", "--type=merge", "-p", `{"spec":{"partitions":6}}`)
		c.WaitJSONPath(time.Minute, ns, "kafkatopic", "orders", ".status.partitions", "6")
		_, text := httpGet(c.PodAddr(ns, "second-agent", 9096), "/metrics")
		if !strings.Contains(text, "kaas_operator_leader 0\n") || strings.Contains(text, `kaas_operator_reconciles_total{controller="kafkatopic"}`) {
			t.Errorf("the second agent acted:\n%s", text)
		}
		if holder := c.JSONPath(ns, "lease", "kc-volume-agent", ".spec.holderIdentity"); strings.HasPrefix(holder, "second-agent_") {
			t.Errorf("the second agent holds the lease: %s", holder)
		}
	})

	t.Run("admission rejects bad specs", func(t *testing.T) {
		c := c.For(t)
		for _, tc := range []struct{ manifest, says string }{
			{kaastest.Topic("orders", 2, ""), "partitions may grow but never shrink"},
			{kaastest.Topic("zero", 0, ""), "should be greater than or equal to 1"},
			{kaastest.Topic("internal", 1, ", topicName: __offsets"), "reserved for kaas"},
			{kaastest.Topic("slash", 1, ", topicName: a/b"), "topicName"},
			{"apiVersion: kaas.dev/v1alpha1\nkind: KafkaCluster\nmetadata: {name: both, namespace: demo}\nspec: {replicas: 1, version: 0.1.0, storage: {existingClaim: x, size: 1Gi}}\n", "set either existingClaim or size"},
			{"apiVersion: kaas.dev/v1alpha1\nkind: KafkaCluster\nmetadata: {name: ipcert, namespace: demo}\nspec: {replicas: 1, version: 0.1.0, storage: {existingClaim: x}, listener: {advertise: PodIp, tls: {}}}\n", "the operator's certificate names DNS names"},
			{"apiVersion: kaas.dev/v1alpha1\nkind: KafkaCluster\nmetadata: {name: fence, namespace: demo}\nspec: {replicas: 1, version: 0.1.0, storage: {existingClaim: x}, timeouts: {fenceTimeoutMs: 9000, sessionTimeoutMs: 10000}}\n", "sessionTimeoutMs must exceed fenceTimeoutMs"},
		} {
			out, err := c.KubectlStdin(tc.manifest, "apply", "-f", "-")
			if err == nil || !strings.Contains(out, tc.says) {
				t.Errorf("want rejection saying %q, got err=%v: %s", tc.says, err, out)
			}
		}
		// Dangerous changes to live objects are refused by the CRD's CEL rules, with a message.
		// A topic of no running cluster: nothing reconciles it while the test changes it.
		c.Apply("apiVersion: kaas.dev/v1alpha1\nkind: KafkaTopic\nmetadata: {name: renamed, namespace: " + ns + "}\nspec: {clusterRef: nocluster, partitions: 1, topicName: Renamed_T}\n")
		defer c.Kubectl("-n", ns, "delete", "kafkatopic", "renamed", "--wait=false")
		for _, tc := range []struct {
			kind, name, typ, patch, says string
		}{
			{"kafkacluster", "kc", "merge", `{"spec":{"storage":{"existingClaim":"other"}}}`, "storage is immutable"},
			{"kafkacluster", "kc", "merge", `{"spec":{"storage":{"existingClaim":null,"size":"1Gi"}}}`, "storage is immutable"},
			{"kafkacluster", "kc", "merge", `{"spec":{"version":"latest"}}`, "spec.version in body should match"},
			{"kafkacluster", "kc", "merge", `{"spec":{"config":{"log.retention.hours":"1"}}}`, "config has keys kaas does not take"},
			{"kafkacluster", "kc", "merge", `{"spec":{"config":{"security.protocol":"SSL"}}}`, "config has keys kaas does not take"},
			{"kafkacluster", "kc", "merge", `{"spec":{"listener":{"authentication":{"type":"tls"}}}}`, "type tls needs listener.tls"},
			{"kafkacluster", "kc", "merge", `{"spec":{"listener":{"authentication":{"type":"oauth"}}}}`, "type oauth needs either jwksEndpointUri"},
			{"kafkacluster", "kc", "merge", `{"spec":{"listener":{"authentication":{"type":"oauth","jwksEndpointUri":"https://idp/certs","checkAudience":true}}}}`, "checkAudience needs clientId"},
			{"kafkacluster", "kc", "merge", `{"spec":{"listener":{"authentication":{"type":"scram-sha-512","secretName":"u","clientId":"kafka"}}}}`, "the OAuth fields are for type oauth"},
			{"kafkacluster", "kc", "merge", `{"spec":{"podTemplate":{"env":[{"name":"KAAS_LISTEN","value":"[::]:1"}]}}}`, "names starting with KAAS_ or MY_POD_ are set by the operator"},
			{"kafkacluster", "kc", "merge", `{"spec":{"listener":{"external":{"type":"ingress","bootstrap":{"host":"k.example"},"brokers":[{"broker":0,"host":"k0.example"}]}}}}`, "type ingress passes TLS through"},
			{"kafkacluster", "kc", "merge", `{"spec":{"listener":{"tls":{"secretName":"t"},"external":{"type":"ingress","bootstrap":{"host":"k.example"}}}}}`, "type ingress needs bootstrap.host and a host for every broker"},
			{"kafkacluster", "kc", "merge", `{"spec":{"listener":{"external":{"type":"loadbalancer","bootstrap":{"nodePort":31000}}}}}`, "nodePort fields are for type nodeport"},
			{"kafkacluster", "kc", "merge", `{"spec":{"listener":{"external":{"type":"nodeport","port":9094}}}}`, "listener.external.port must differ"},
			{"kafkatopic", "orders", "merge", `{"spec":{"topicName":"orders"}}`, "topicName cannot be added or removed after creation"},
			{"kafkatopic", "renamed", "json", `[{"op":"remove","path":"/spec/topicName"}]`, "topicName cannot be added or removed after creation"},
			{"kafkatopic", "renamed", "merge", `{"spec":{"topicName":"Other"}}`, "topicName is immutable"},
		} {
			out, err := c.Kubectl("-n", ns, "patch", tc.kind, tc.name, "--type="+tc.typ, "-p", tc.patch)
			if err == nil || !strings.Contains(out, tc.says) {
				t.Errorf("patch %s/%s %s: want refusal saying %q, got err=%v: %s", tc.kind, tc.name, tc.patch, tc.says, err, out)
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
		// The agent counts its topics by readiness: the ready one among them.
		readyTopics := regexp.MustCompile(`(?m)^kaas_operator_resources\{kind="KafkaTopic",ready="true"\} [1-9]`)
		c.Eventually(time.Minute, "the ready topic in kaas_operator_resources, and an empty work queue", func() (bool, error) {
			_, text := httpGet(c.PodAddr(ns, agent, 9096), "/metrics")
			drained := strings.Contains(text, "kaas_operator_work_queue_depth{controller=\"kafkatopic\"} 0\n")
			return readyTopics.MatchString(text) && drained, fmt.Errorf("metrics: %s", text)
		})
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

	t.Run("KafkaUsers: a password Secret, the user's entry in kafka-users.json, removed on delete", func(t *testing.T) {
		c := c.For(t)
		// The agent keeps users' Secrets (and deletes those a user no longer needs) but may not
		// list or watch Secrets.
		agentSA := "system:serviceaccount:" + ns + ":kc-volume-agent"
		for _, check := range [][3]string{
			{"create", "secrets", "yes"}, {"delete", "secrets", "yes"}, {"patch", "kafkausers --subresource=status", "yes"}, {"watch", "kafkausers", "yes"},
			{"list", "secrets", "no"}, {"update", "secrets", "no"}, {"patch", "kafkausers", "no"},
		} {
			args := append([]string{"auth", "can-i", "-n", ns, "--as", agentSA, check[0]}, strings.Fields(check[1])...)
			if out, _ := c.Kubectl(args...); strings.TrimSpace(out) != check[2] {
				t.Errorf("volume agent may %s %s: %s, want %s", check[0], check[1], out, check[2])
			}
		}
		if out, err := c.KubectlStdin(userYAML("mallory", "{type: tls-external, password: {valueFrom: {secretKeyRef: {name: x, key: pw}}}}", ""), "apply", "-f", "-"); err == nil || !strings.Contains(out, "authentication.password is for type scram-sha-512") {
			t.Errorf("want a refused password for tls-external, got err=%v: %s", err, out)
		}
		c.Apply(userYAML("alice", "{type: scram-sha-512}", `
  authorization:
    type: simple
    acls:
    - {resource: {type: topic, name: orders}, operations: [Read, Write, Describe]}
    - {resource: {type: group, name: orders-, patternType: prefix}, operations: [Read]}
  quotas: {producerByteRate: 1048576, requestPercentage: 50}`) + `---
apiVersion: v1
kind: Secret
metadata: {name: bob-password, namespace: ` + ns + `}
stringData: {pw: bob-first-password}
---` + userYAML("bob", "{type: scram-sha-512, password: {valueFrom: {secretKeyRef: {name: bob-password, key: pw}}}}", ""))
		defer c.Kubectl("-n", ns, "delete", "kafkauser", "bob", "--wait=false")
		defer c.Kubectl("-n", ns, "delete", "secret", "bob-password", "--wait=false")
		for _, u := range []string{"alice", "bob"} {
			c.WaitJSONPath(time.Minute, ns, "kafkauser", u, `.status.conditions[?(@.type=="Ready")].status`, "True")
			for _, field := range []string{".status.username", ".status.secret"} {
				if got := c.JSONPath(ns, "kafkauser", u, field); got != u {
					t.Errorf("%s: %s %q", u, field, got)
				}
			}
		}
		aliceUID := c.JSONPath(ns, "kafkauser", "alice", ".metadata.uid")
		if got := c.JSONPath(ns, "secret", "alice", `.metadata.ownerReferences[?(@.kind=="KafkaUser")].uid`); got != aliceUID {
			t.Errorf("Secret alice owned by %q, want %s", got, aliceUID)
		}
		password := secretValue(c, "alice", "password")
		if !regexp.MustCompile(`^[A-Za-z0-9]{32}$`).MatchString(password) {
			t.Errorf("generated password %q is not 32 alphanumerics", password)
		}
		jaas := secretValue(c, "alice", "sasl.jaas.config")
		if want := `org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="` + password + `";`; jaas != want {
			t.Errorf("sasl.jaas.config %q, want %q", jaas, want)
		}
		file := readUsersFile(t, volume)
		alice, ok := file.Users["alice"]
		if !ok {
			t.Fatalf("no alice in kafka-users.json: %+v", file)
		}
		if alice.UID != aliceUID || len(alice.ACLs) != 2 || alice.ACLs[1].Resource.PatternType != "prefix" || alice.ACLs[1].Resource.Name != "orders-" ||
			strings.Join(alice.ACLs[0].Operations, ",") != "Read,Write,Describe" || alice.Quotas.ProducerByteRate != 1048576 || alice.Quotas.RequestPercentage != 50 {
			t.Errorf("alice's entry: %+v", alice)
		}
		checkScram(t, "alice", alice, password)
		// A provided password is the user's, copied into its Secret; a changed one is picked up.
		bobPassword := "bob-first-password"
		for _, step := range []string{"first", "changed"} {
			if step == "changed" {
				bobPassword = "bob-changed-password"
				c.MustKubectl("-n", ns, "patch", "secret", "bob-password", "--type=merge", "-p", `{"stringData":{"pw":"`+bobPassword+`"}}`)
				// The agent cannot watch Secrets (it would notice within a minute): any change to the user reconciles it now.
				c.MustKubectl("-n", ns, "annotate", "kafkauser", "bob", "--overwrite", "e2e/poke=1")
			}
			c.Eventually(time.Minute, "bob's Secret holds the "+step+" password", func() (bool, error) {
				got := secretValue(c, "bob", "password")
				return got == bobPassword, fmt.Errorf("password %q", got)
			})
			c.Eventually(time.Minute, "bob's entry takes the "+step+" password", func() (bool, error) {
				bob, ok := readUsersFile(t, volume).Users["bob"]
				return ok && scramMatches(bob.Scram["SCRAM-SHA-512"], bobPassword), fmt.Errorf("entry %+v", bob)
			})
		}

		// What the user cannot be until fixed, each in status and an event.
		c.Apply("apiVersion: v1\nkind: Secret\nmetadata: {name: eve, namespace: " + ns + "}\nstringData: {password: not-the-operators}\n" +
			"---" + userYAML("carol", "{type: scram-sha-512, password: {valueFrom: {secretKeyRef: {name: carol-password, key: pw}}}}", "") +
			"---" + userYAML("dave", "{type: scram-sha-512}", "\n  authorization: {type: simple, acls: [{resource: {type: group, name: g}, operations: [Write]}]}") +
			"---" + userYAML("eve", "{type: scram-sha-512}", ""))
		for _, u := range []string{"carol", "dave", "eve"} {
			defer c.Kubectl("-n", ns, "delete", "kafkauser", u, "--wait=false")
		}
		defer c.Kubectl("-n", ns, "delete", "secret", "eve", "carol-password", "--wait=false")
		for _, tc := range [][3]string{
			{"carol", "PasswordSecretNotFound", `the password Secret "carol-password" does not exist`},
			{"dave", "InvalidSpec", "Kafka does not support Write on a group resource"},
			{"eve", "SecretConflict", `Secret "eve" exists and is not this KafkaUser's`},
		} {
			c.WaitJSONPath(time.Minute, ns, "kafkauser", tc[0], `.status.conditions[?(@.type=="Ready")].reason`, tc[1])
			if msg := c.JSONPath(ns, "kafkauser", tc[0], `.status.conditions[?(@.type=="Ready")].message`); !strings.Contains(msg, tc[2]) {
				t.Errorf("%s: message %q does not say %q", tc[0], msg, tc[2])
			}
			c.Eventually(time.Minute, "a "+tc[1]+" event on "+tc[0], func() (bool, error) {
				out, _ := c.Kubectl("-n", ns, "get", "events", "--field-selector", "involvedObject.kind=KafkaUser,involvedObject.name="+tc[0], "-o", "jsonpath={.items[*].reason}")
				return strings.Contains(out, tc[1]), fmt.Errorf("events %q", out)
			})
		}
		if got := secretValue(c, "eve", "password"); got != "not-the-operators" {
			t.Errorf("the operator changed a Secret it does not own: %q", got)
		}
		users := readUsersFile(t, volume).Users
		for _, u := range []string{"carol", "dave", "eve"} {
			if _, ok := users[u]; ok {
				t.Errorf("%s, not ready, has an entry", u)
			}
		}
		// The missing password Secret appears: carol becomes ready (retried every 30 s).
		c.Apply("apiVersion: v1\nkind: Secret\nmetadata: {name: carol-password, namespace: " + ns + "}\nstringData: {pw: carol-password}\n")
		c.WaitJSONPath(time.Minute, ns, "kafkauser", "carol", `.status.conditions[?(@.type=="Ready")].status`, "True")

		// Deleting a user removes its entry (the agent's sweep) and its Secret (garbage collection).
		c.MustKubectl("-n", ns, "delete", "kafkauser", "alice", "--wait=true", "--timeout=30s")
		c.Eventually(30*time.Second, "alice gone from kafka-users.json", func() (bool, error) {
			users := readUsersFile(t, volume).Users
			_, alive := users["alice"]
			_, bob := users["bob"]
			return !alive && bob, fmt.Errorf("users %v", users)
		})
		c.Eventually(time.Minute, "Secret alice garbage-collected", func() (bool, error) {
			out, err := c.Kubectl("-n", ns, "get", "secret", "alice", "--ignore-not-found", "-o", "name")
			return err == nil && strings.TrimSpace(out) == "", fmt.Errorf("still there: %q (%v)", out, err)
		})
	})

	t.Run("KafkaUsers of type tls: a certificate from the cluster's clients CA, or ClientsCaNotFound", func(t *testing.T) {
		c := c.For(t)
		// kc's listener has no TLS: it has no clients CA to issue from.
		c.Apply(userYAML("trent", "{type: tls}", ""))
		defer c.Kubectl("-n", ns, "delete", "kafkauser", "trent", "--wait=false")
		c.WaitJSONPath(time.Minute, ns, "kafkauser", "trent", `.status.conditions[?(@.type=="Ready")].reason`, "ClientsCaNotFound")
		if msg := c.JSONPath(ns, "kafkauser", "trent", `.status.conditions[?(@.type=="Ready")].message`); !strings.Contains(msg, "authentication: {type: tls}") || !strings.Contains(msg, `"kc-clients-ca"`) {
			t.Errorf("ClientsCaNotFound message %q does not say what the listener needs", msg)
		}
		if _, ok := readUsersFile(t, volume).Users["CN=trent"]; ok {
			t.Errorf("trent, without a certificate, has an entry")
		}

		// A cluster whose listener is the operator's TLS with client certificates keeps a clients CA.
		mtlsVolume := c.VolumeDir("clients")
		c.Apply(kaastest.Claim("clients") + `---
apiVersion: kaas.dev/v1alpha1
kind: KafkaCluster
metadata: {name: mtls, namespace: ` + ns + `}
spec:
  replicas: 1
  version: 0.1.0
  storage: {existingClaim: clients}
  listener: {advertise: PodDns, tls: {}, authentication: {type: tls}}
---
apiVersion: kaas.dev/v1alpha1
kind: KafkaUser
metadata: {name: walter, namespace: ` + ns + `}
spec:
  clusterRef: mtls
  authentication: {type: tls}
  authorization:
    type: simple
    acls: [{resource: {type: topic, name: orders}, operations: [Read]}]
`)
		defer c.Kubectl("-n", ns, "delete", "kafkacluster", "mtls", "--wait=false")
		c.WaitJSONPath(2*time.Minute, ns, "kafkauser", "walter", `.status.conditions[?(@.type=="Ready")].status`, "True")
		for field, want := range map[string]string{".status.username": "CN=walter", ".status.secret": "walter"} {
			if got := c.JSONPath(ns, "kafkauser", "walter", field); got != want {
				t.Errorf("walter: %s %q, want %q", field, got, want)
			}
		}
		clusterUID := c.JSONPath(ns, "kafkacluster", "mtls", ".metadata.uid")
		for _, secret := range []string{"mtls-clients-ca", "mtls-clients-ca-cert"} {
			if got := c.JSONPath(ns, "secret", secret, `.metadata.ownerReferences[?(@.kind=="KafkaCluster")].uid`); got != clusterUID {
				t.Errorf("Secret %s owned by %q, want the KafkaCluster %s", secret, got, clusterUID)
			}
		}
		// The brokers trust the clients CA for client certificates.
		sts := func(path string) string { return c.JSONPath(ns, "statefulset", "mtls", ".spec.template.spec"+path) }
		if got := sts(`.volumes[?(@.name=="clients-ca")].secret.secretName`); got != "mtls-clients-ca-cert" {
			t.Errorf("clients-ca volume from Secret %q", got)
		}
		if got := sts(`.containers[0].env[?(@.name=="KAAS_SSL_TRUSTSTORE")].value`); got != "/etc/kaas/clients-ca/ca.crt" {
			t.Errorf("KAAS_SSL_TRUSTSTORE %q", got)
		}
		if got := c.JSONPath(ns, "secret", "walter", `.metadata.ownerReferences[?(@.kind=="KafkaUser")].uid`); got != c.JSONPath(ns, "kafkauser", "walter", ".metadata.uid") {
			t.Errorf("Secret walter owned by %q", got)
		}
		caPEM := secretValue(c, "mtls-clients-ca-cert", "ca.crt")
		if got := secretValue(c, "walter", "ca.crt"); got != caPEM {
			t.Errorf("walter's ca.crt is not mtls-clients-ca-cert's:\n%s", got)
		}
		if key := secretValue(c, "walter", "user.key"); !strings.HasPrefix(key, "-----BEGIN PRIVATE KEY-----") {
			t.Errorf("user.key is not PKCS#8 PEM: %.40q", key)
		}
		if _, err := tls.X509KeyPair([]byte(secretValue(c, "walter", "user.crt")), []byte(secretValue(c, "walter", "user.key"))); err != nil {
			t.Errorf("user.crt and user.key are not a pair: %v", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM([]byte(caPEM)) {
			t.Fatalf("mtls-clients-ca-cert has no certificate: %q", caPEM)
		}
		block, _ := pem.Decode([]byte(secretValue(c, "walter", "user.crt")))
		if block == nil {
			t.Fatal("walter's user.crt is not PEM")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("walter's certificate does not chain to the clients CA for client auth: %v", err)
		}
		if got := cert.Subject.String(); got != "CN=walter" || len(cert.Subject.Names) != 1 {
			t.Errorf("subject %q (%d attributes), want exactly CN=walter", got, len(cert.Subject.Names))
		}
		if life := cert.NotAfter.Sub(cert.NotBefore); life < 364*24*time.Hour || life > 367*24*time.Hour {
			t.Errorf("certificate lives %v, want a year", life)
		}
		walter, ok := readUsersFile(t, mtlsVolume).Users["CN=walter"]
		if !ok {
			t.Fatalf("no CN=walter in the mtls volume's kafka-users.json")
		}
		if len(walter.Scram) != 0 || len(walter.ACLs) != 1 || walter.ACLs[0].Resource.Name != "orders" {
			t.Errorf("walter's entry: %+v", walter)
		}
		// Java clients' keystore, with its password (keytool reads it: operator/src/user/keystore.rs).
		if got := secretKeys(c, "walter"); got != "ca.crt user.crt user.key user.p12 user.password" {
			t.Errorf("walter's Secret has keys %q", got)
		}
		if pw := secretValue(c, "walter", "user.password"); !regexp.MustCompile(`^[A-Za-z0-9]{32}$`).MatchString(pw) {
			t.Errorf("user.password %q is not 32 alphanumerics", pw)
		}
		// A Secret that lost its certificate gets a new one, from the same CA, and a new keystore.
		first, firstP12 := secretValue(c, "walter", "user.crt"), secretValue(c, "walter", "user.p12")
		c.MustKubectl("-n", ns, "patch", "secret", "walter", "--type=json", "-p", `[{"op":"remove","path":"/data/user.crt"}]`)
		c.MustKubectl("-n", ns, "annotate", "kafkauser", "walter", "--overwrite", "e2e/poke=1")
		c.Eventually(time.Minute, "walter's certificate issued again", func() (bool, error) {
			got := secretValue(c, "walter", "user.crt")
			return got != "" && got != first, fmt.Errorf("user.crt %.60q", got)
		})
		if p12 := secretValue(c, "walter", "user.p12"); p12 == "" || p12 == firstP12 {
			t.Errorf("walter's keystore was not made again with the certificate")
		}

		// The Secret holds only what the authentication type needs: a user switched from SCRAM to
		// tls loses its password and gains a certificate; switched to tls-external, it loses its
		// Secret. A Secret of a user's name that the user does not own stays.
		c.Apply(`
apiVersion: kaas.dev/v1alpha1
kind: KafkaUser
metadata: {name: sybil, namespace: ` + ns + `}
spec: {clusterRef: mtls, authentication: {type: scram-sha-512}}
---
apiVersion: v1
kind: Secret
metadata: {name: trudy, namespace: ` + ns + `}
stringData: {user.crt: not-the-operators}
---
apiVersion: kaas.dev/v1alpha1
kind: KafkaUser
metadata: {name: trudy, namespace: ` + ns + `}
spec: {clusterRef: mtls, authentication: {type: tls-external}}
`)
		defer c.Kubectl("-n", ns, "delete", "kafkauser", "sybil", "trudy", "--wait=false")
		defer c.Kubectl("-n", ns, "delete", "secret", "trudy", "--wait=false")
		c.WaitJSONPath(time.Minute, ns, "kafkauser", "sybil", `.status.conditions[?(@.type=="Ready")].status`, "True")
		if got := secretKeys(c, "sybil"); got != "password sasl.jaas.config" {
			t.Fatalf("SCRAM user sybil's Secret has keys %q", got)
		}
		c.MustKubectl("-n", ns, "patch", "kafkauser", "sybil", "--type=merge", "-p", `{"spec":{"authentication":{"type":"tls"}}}`)
		c.Eventually(time.Minute, "sybil's Secret holds a certificate and no password", func() (bool, error) {
			got := secretKeys(c, "sybil")
			return got == "ca.crt user.crt user.key user.p12 user.password", fmt.Errorf("keys %q", got)
		})
		if _, err := tls.X509KeyPair([]byte(secretValue(c, "sybil", "user.crt")), []byte(secretValue(c, "sybil", "user.key"))); err != nil {
			t.Errorf("sybil's user.crt and user.key are not a pair: %v", err)
		}
		c.WaitJSONPath(time.Minute, ns, "kafkauser", "sybil", ".status.username", "CN=sybil")
		c.MustKubectl("-n", ns, "patch", "kafkauser", "sybil", "--type=merge", "-p", `{"spec":{"authentication":{"type":"tls-external"}}}`)
		c.Eventually(time.Minute, "sybil's Secret deleted", func() (bool, error) {
			out, err := c.Kubectl("-n", ns, "get", "secret", "sybil", "--ignore-not-found", "-o", "name")
			return err == nil && strings.TrimSpace(out) == "", fmt.Errorf("still there: %q (%v)", out, err)
		})
		c.Eventually(time.Minute, "sybil ready, naming no Secret, with a SecretDeleted event", func() (bool, error) {
			ready := c.JSONPath(ns, "kafkauser", "sybil", `.status.conditions[?(@.type=="Ready")].status`)
			secret := c.JSONPath(ns, "kafkauser", "sybil", ".status.secret")
			events, _ := c.Kubectl("-n", ns, "get", "events", "--field-selector", "involvedObject.kind=KafkaUser,involvedObject.name=sybil", "-o", "jsonpath={.items[*].reason}")
			return ready == "True" && secret == "" && strings.Contains(events, "SecretDeleted"), fmt.Errorf("ready %q, secret %q, events %q", ready, secret, events)
		})
		c.WaitJSONPath(time.Minute, ns, "kafkauser", "trudy", `.status.conditions[?(@.type=="Ready")].status`, "True")
		if got := secretValue(c, "trudy", "user.crt"); got != "not-the-operators" {
			t.Errorf("the operator changed or deleted a Secret it does not own: user.crt %q", got)
		}
	})

	t.Run("operator restarted mid-reconcile converges", func(t *testing.T) {
		c := c.For(t)
		pod, _ := leaseHolder(c)
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

	t.Run("kubectl scale scales the cluster, and a scale-down drains", func(t *testing.T) {
		c := c.For(t)
		const drained = "draining: asking the controller to move partitions away"
		drains := strings.Count(c.PodLogs(ns, "kc-2", "kaas"), drained)
		c.MustKubectl("-n", ns, "scale", "kafkacluster/kc", "--replicas=3")
		c.WaitJSONPath(2*time.Minute, ns, "kafkacluster", "kc", ".status.readyBrokers", "3")
		c.WaitJSONPath(time.Minute, ns, "kafkacluster", "kc", ".status.replicas", "3")
		out := c.MustKubectl("-n", ns, "get", "kafkacluster", "kc", "--subresource=scale", "-o", "jsonpath={.spec.replicas} {.status.replicas} {.status.selector}")
		if !strings.HasPrefix(out, "3 3 ") || !strings.Contains(out, "app.kubernetes.io/component=broker") {
			t.Errorf("scale subresource: %q", out)
		}
		c.MustKubectl("-n", ns, "scale", "kafkacluster/kc", "--replicas=2")
		c.WaitJSONPath(2*time.Minute, ns, "kafkacluster", "kc", ".status.replicas", "2")
		c.Eventually(time.Minute, "kc-2 drained on scale-down", func() (bool, error) {
			n := strings.Count(c.PodLogs(ns, "kc-2", "kaas"), drained)
			return n > drains, fmt.Errorf("%d drains (before: %d)", n, drains)
		})
		events, _ := c.Kubectl("-n", ns, "get", "events", "--field-selector", "involvedObject.kind=KafkaCluster,involvedObject.name=kc", "-o", "jsonpath={.items[*].reason}")
		for _, reason := range []string{"ScalingUp", "ScalingDown", "Ready"} {
			if !strings.Contains(events, reason) {
				t.Errorf("no %s event on kafkacluster/kc: %q", reason, events)
			}
		}
		c.WaitJSONPath(2*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
	})

	t.Run("a refused config is reported and stops nothing else", func(t *testing.T) {
		c := c.For(t)
		// A value the schema cannot judge: the operator refuses it in status, keeps the brokers'
		// template (no restart) and still reconciles the rest (here a scale-up).
		hash := c.JSONPath(ns, "statefulset", "kc", `.spec.template.metadata.annotations.kaas\.dev/pod-inputs-hash`)
		replicas := c.JSONPath(ns, "kafkacluster", "kc", ".spec.replicas")
		if hash == "" || replicas != "2" {
			t.Fatalf("hash %q, replicas %q", hash, replicas)
		}
		c.MustKubectl("-n", ns, "patch", "kafkacluster", "kc", "--type=merge", "-p", `{"spec":{"replicas":3,"config":{"num.partitions":"0"}}}`)
		c.WaitJSONPath(time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Degraded")].reason`, "InvalidConfig")
		if msg := c.JSONPath(ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Degraded")].message`); !strings.Contains(msg, `broker config "num.partitions": value "0" must be at least 1`) {
			t.Errorf("Degraded message %q", msg)
		}
		c.WaitJSONPath(2*time.Minute, ns, "kafkacluster", "kc", ".status.readyBrokers", "3")
		if got := c.JSONPath(ns, "statefulset", "kc", `.spec.template.metadata.annotations.kaas\.dev/pod-inputs-hash`); got != hash {
			t.Errorf("a refused config was rolled out: template %s -> %s", hash, got)
		}
		c.Eventually(time.Minute, "an InvalidConfig event", func() (bool, error) {
			out, _ := c.Kubectl("-n", ns, "get", "events", "--field-selector", "involvedObject.kind=KafkaCluster,involvedObject.name=kc", "-o", "jsonpath={.items[*].reason}")
			return strings.Contains(out, "InvalidConfig"), fmt.Errorf("events %q", out)
		})
		// A Kafka-named setting the brokers take goes out as their flag.
		c.MustKubectl("-n", ns, "patch", "kafkacluster", "kc", "--type=merge", "-p", `{"spec":{"config":{"num.partitions":"2"}}}`)
		c.WaitJSONPath(time.Minute, ns, "statefulset", "kc", `.spec.template.spec.containers[0].env[?(@.name=="KAAS_DEFAULT_PARTITIONS")].value`, "2")
		c.WaitJSONPath(3*time.Minute, ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
		if got := c.JSONPath(ns, "kafkacluster", "kc", `.status.conditions[?(@.type=="Degraded")].status`); got != "False" {
			t.Errorf("still Degraded: %q", got)
		}
	})

	t.Run("a namespace-scoped install beside the cluster-wide one takes its namespace's clusters", func(t *testing.T) {
		c := c.For(t)
		const team = "team-a"
		// config/namespaced, into namespace team-a, as a user would with kustomize.
		dir := t.TempDir()
		base, err := filepath.Rel(dir, filepath.Join(root, "config", "namespaced")) // kustomize takes no absolute base
		if err != nil {
			t.Fatal(err)
		}
		kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: " + team + "\nresources: [" + base + "]\n"
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: " + team + "}\n")
		defer c.Kubectl("delete", "namespace", team, "--wait=false")
		c.MustKubectl("apply", "-k", dir)
		// Its RBAC is a Role in its namespace: nothing outside it, nothing cluster-wide.
		sa := "system:serviceaccount:" + team + ":kaas-operator"
		for _, check := range []struct {
			ns, verb, resource, want string
		}{
			{team, "patch", "statefulsets", "yes"},
			{team, "list", "kafkaclusters", "yes"},
			{ns, "list", "kafkaclusters", "no"},
			{"", "get", "storageclasses", "no"},
		} {
			args := []string{"auth", "can-i", "--as", sa, check.verb, check.resource}
			if check.ns != "" {
				args = append(args, "-n", check.ns)
			}
			// The answer is the last line (kubectl warns first that storageclasses have no namespace).
			if out, _ := c.Kubectl(args...); !strings.HasSuffix(strings.TrimSpace(out), "\n"+check.want) && strings.TrimSpace(out) != check.want {
				t.Errorf("%s may %s %s in %q: %s, want %s", sa, check.verb, check.resource, check.ns, out, check.want)
			}
		}
		c.Eventually(2*time.Minute, "two ready operator replicas in "+team, func() (bool, error) {
			out, err := c.Kubectl("-n", team, "get", "pods", "-l", "app.kubernetes.io/name=kaas-operator", "-o", `jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}`)
			return err == nil && strings.TrimSpace(out) == "True True", fmt.Errorf("ready: %q", out)
		})
		// A cluster in team-a: both installs watch it; the namespaced one reconciles it.
		c.Apply("apiVersion: kaas.dev/v1alpha1\nkind: KafkaCluster\nmetadata: {name: tk, namespace: " + team + "}\nspec: {replicas: 1, version: 0.1.0, storage: {existingClaim: missing}}\n")
		c.WaitJSONPath(time.Minute, team, "kafkacluster", "tk", `.metadata.annotations.kaas\.dev/operator`, team+"/namespaced")
		c.WaitJSONPath(time.Minute, team, "kafkacluster", "tk", `.status.conditions[?(@.type=="Degraded")].reason`, "StorageClaimMissing")
		c.WaitJSONPath(time.Minute, team, "statefulset", "tk", ".metadata.ownerReferences[0].name", "tk")
		c.Eventually(time.Minute, "the cluster-wide install says it leaves tk alone", func() (bool, error) {
			out, _ := c.Kubectl("-n", team, "get", "events", "--field-selector", "involvedObject.kind=KafkaCluster,involvedObject.name=tk", "-o", "jsonpath={.items[*].reason}")
			return strings.Contains(out, "ManagedByAnotherOperator"), fmt.Errorf("events %q", out)
		})
		// The namespaced install's leader reconciled it; the cluster in demo stays the
		// cluster-wide install's.
		if got := c.JSONPath(ns, "kafkacluster", "kc", `.metadata.annotations.kaas\.dev/operator`); got != operatorNS+"/all-namespaces" {
			t.Errorf("kc claimed by %q", got)
		}
		holder := strings.Split(c.JSONPath(team, "lease", "kaas-operator", ".spec.holderIdentity"), "_")[0]
		c.Eventually(time.Minute, "the namespaced leader counts its reconciles", func() (bool, error) {
			_, text := httpGet(c.PodAddr(team, holder, 9096), "/metrics")
			return strings.Contains(text, `kaas_operator_reconciles_total{controller="kafkacluster"}`), fmt.Errorf("metrics: %s", text)
		})
	})

	t.Run("a reconcile error reaches status and an event", func(t *testing.T) {
		c := c.For(t)
		// A name that makes the headless Service's name longer than 63 characters: the API
		// server refuses it, every time.
		name := "a-cluster-whose-name-is-too-long-for-its-service-names-x"
		c.Apply("apiVersion: kaas.dev/v1alpha1\nkind: KafkaCluster\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec: {replicas: 1, version: 0.1.0, storage: {existingClaim: shared}}\n")
		defer c.Kubectl("-n", ns, "delete", "kafkacluster", name, "--wait=false")
		c.WaitJSONPath(time.Minute, ns, "kafkacluster", name, `.status.conditions[?(@.type=="Reconciled")].reason`, "KubernetesError")
		if msg := c.JSONPath(ns, "kafkacluster", name, `.status.conditions[?(@.type=="Reconciled")].message`); !strings.Contains(msg, "63") {
			t.Errorf("Reconciled message %q", msg)
		}
		c.Eventually(time.Minute, "a ReconcileFailed event", func() (bool, error) {
			out, _ := c.Kubectl("-n", ns, "get", "events", "--field-selector", "involvedObject.kind=KafkaCluster,involvedObject.name="+name, "-o", "jsonpath={.items[*].reason}")
			return strings.Contains(out, "ReconcileFailed"), fmt.Errorf("events %q", out)
		})
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

	// Broker pods that never start: the status names the pod and the reason in the words of the
	// component that knows it (each cluster has a claim of its own, on a spare volume).
	for _, tc := range []struct {
		what, cluster, claim, spec, reason string
		says                               []string
	}{
		// The API server refuses the pod (no such PriorityClass): the StatefulSet controller
		// only records a FailedCreate event on the StatefulSet, so no pod status says why.
		{"a broker pod the StatefulSet cannot create", "nopods", "spare", "podTemplate: {priorityClassName: no-such-priority}",
			"BrokerPodsNotCreated", []string{"0 of 1 broker pods exist", "no-such-priority"}},
		// The listener's TLS Secret does not exist: the pod stays ContainerCreating and only the
		// kubelet's FailedMount event on the pod says why.
		{"a Secret a broker pod cannot mount", "nosecret", "unmounted", "listener: {advertise: PodIp, tls: {secretName: no-such-tls}}",
			"BrokerVolumeNotMounted", []string{"nosecret-0", `secret "no-such-tls" not found`}},
	} {
		t.Run("status names "+tc.what, func(t *testing.T) {
			c := c.For(t)
			c.Apply(kaastest.Claim(tc.claim) + `---
apiVersion: kaas.dev/v1alpha1
kind: KafkaCluster
metadata: {name: ` + tc.cluster + `, namespace: ` + ns + `}
spec:
  replicas: 1
  version: 0.1.0
  storage: {existingClaim: ` + tc.claim + `}
  ` + tc.spec + `
`)
			defer c.Kubectl("-n", ns, "delete", "kafkacluster", tc.cluster, "--wait=false")
			c.WaitJSONPath(2*time.Minute, ns, "kafkacluster", tc.cluster, `.status.conditions[?(@.type=="Degraded")].reason`, tc.reason)
			msg := c.JSONPath(ns, "kafkacluster", tc.cluster, `.status.conditions[?(@.type=="Degraded")].message`)
			for _, part := range tc.says {
				if !strings.Contains(msg, part) {
					t.Fatalf("Degraded message %q does not say %q", msg, part)
				}
			}
		})
	}

	t.Run("a PodMonitor per cluster once the Prometheus Operator's CRD exists", func(t *testing.T) {
		c := c.For(t)
		if out, _ := c.Kubectl("-n", ns, "get", "podmonitors"); !strings.Contains(out, "the server doesn't have a resource type") {
			t.Fatalf("PodMonitor CRD before the test installs it: %s", out)
		}
		// The CRD's name and version as the Prometheus Operator ships it (its schema does not
		// matter to the operator, which only applies its PodMonitors).
		c.Apply(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: podmonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: PodMonitor, listKind: PodMonitorList, plural: podmonitors, singular: podmonitor}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`)
		c.MustKubectl("wait", "--for=condition=Established", "crd/podmonitors.monitoring.coreos.com", "--timeout=60s")
		// Any change wakes the reconciler; the PodMonitor goes out with the next reconcile.
		c.MustKubectl("-n", ns, "annotate", "kafkacluster", "kc", "--overwrite", "e2e/poke="+time.Now().Format("150405"))
		c.WaitJSONPath(time.Minute, ns, "podmonitor", "kc-brokers", ".metadata.ownerReferences[0].kind", "KafkaCluster")
		if got := c.JSONPath(ns, "podmonitor", "kc-brokers", `.spec.selector.matchLabels.app\.kubernetes\.io/instance`); got != "kc" {
			t.Errorf("PodMonitor selects instance %q", got)
		}
		if got := c.JSONPath(ns, "podmonitor", "kc-brokers", ".spec.podMetricsEndpoints[0].port"); got != "http" {
			t.Errorf("PodMonitor port %q", got)
		}
		// The operator's own (manager replicas, volume agents): the leading manager applies them
		// in its namespace, as config/prometheus would, so an OLM install is scraped too.
		for _, monitor := range [][2]string{{"kaas-operator", "kaas-operator"}, {"kaas-volume-agents", "volume-agent"}} {
			c.Eventually(2*time.Minute, "PodMonitor "+monitor[0], func() (bool, error) {
				out, err := c.Kubectl("-n", operatorNS, "get", "podmonitor", monitor[0], "-o", "jsonpath={.spec.selector.matchLabels}")
				return err == nil && strings.Contains(out, monitor[1]), fmt.Errorf("%s (%v)", out, err)
			})
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

	t.Run("deleting the cluster deletes what it owns, not the data or users' topics", func(t *testing.T) {
		c := c.For(t)
		c.MustKubectl("-n", ns, "delete", "kafkacluster", "kc", "--wait=false")
		for _, owned := range [][2]string{{"lease", "kc-controller"}, {"lease", "kc-volume-agent"}, {"kafkaclusterassignments", "kc"}, {"statefulset", "kc"}, {"podmonitor", "kc-brokers"}} {
			c.Eventually(2*time.Minute, owned[0]+"/"+owned[1]+" garbage-collected", func() (bool, error) {
				out, err := c.Kubectl("-n", ns, "get", owned[0], owned[1], "--ignore-not-found", "-o", "name")
				return err == nil && strings.TrimSpace(out) == "", fmt.Errorf("still there: %q (%v)", out, err)
			})
		}
		// KafkaTopics made with kubectl are the user's; the claim holds the data.
		for _, kept := range [][2]string{{"kafkatopic", "payments"}, {"persistentvolumeclaim", "shared"}} {
			if _, err := c.Kubectl("-n", ns, "get", kept[0], kept[1]); err != nil {
				t.Errorf("%s/%s deleted with the cluster: %v", kept[0], kept[1], err)
			}
		}
	})
}

const operatorNS = kaastest.OperatorNamespace

// managerPods are the operator's pods, by name.
func managerPods(c *harness.Cluster) []string {
	return strings.Fields(c.MustKubectl("-n", operatorNS, "get", "pods", "-l", "app.kubernetes.io/name=kaas-operator", "-o", "jsonpath={.items[*].metadata.name}"))
}

// managersReady waits until both operator replicas pass their readiness probe.
func managersReady(c *harness.Cluster) {
	c.Eventually(2*time.Minute, "two ready operator replicas", func() (bool, error) {
		out, err := c.Kubectl("-n", operatorNS, "get", "pods", "-l", "app.kubernetes.io/name=kaas-operator", "-o", `jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && strings.TrimSpace(out) == "True True", fmt.Errorf("ready: %q", out)
	})
}

// leaseHolder is the pod holding the manager's Lease (its identity is "<pod>_<random>") and
// the Lease's transitions.
// leaseIdentity is the manager Lease's whole holder identity ("<pod>_<random>": one process).
func leaseIdentity(c *harness.Cluster) string {
	return c.JSONPath(operatorNS, "lease", "kaas-operator", ".spec.holderIdentity")
}

func leaseHolder(c *harness.Cluster) (string, string) {
	holder := c.JSONPath(operatorNS, "lease", "kaas-operator", ".spec.holderIdentity")
	pod, _, _ := strings.Cut(holder, "_")
	return pod, c.JSONPath(operatorNS, "lease", "kaas-operator", ".spec.leaseTransitions")
}

// httpGet returns a GET's status code and body (0 and the error when it fails).
func httpGet(addr, path string) (int, string) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
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

// userYAML is a KafkaUser of cluster kc with spec.authentication authn (a flow mapping) and
// further spec lines extra (each starting "\n  ").
func userYAML(name, authn, extra string) string {
	return "\napiVersion: kaas.dev/v1alpha1\nkind: KafkaUser\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n  clusterRef: kc\n  authentication: " + authn + extra + "\n"
}

// secretKeys is the keys of a Secret in ns, sorted and space-separated ("" when it has none or
// is absent).
func secretKeys(c *harness.Cluster, name string) string {
	out, err := c.Kubectl("-n", ns, "get", "secret", name, "-o", "json")
	if err != nil {
		return ""
	}
	var secret struct {
		Data map[string]string `json:"data"`
	}
	if json.Unmarshal([]byte(out), &secret) != nil {
		return ""
	}
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// secretValue is one key of a Secret in ns, decoded ("" when absent).
func secretValue(c *harness.Cluster, name, key string) string {
	encoded := c.JSONPath(ns, "secret", name, ".data."+strings.ReplaceAll(key, ".", `\.`))
	decoded, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return ""
	}
	return string(decoded)
}

type scramCredential struct {
	Salt       string `json:"salt"`
	Iterations int    `json:"iterations"`
	StoredKey  string `json:"storedKey"`
	ServerKey  string `json:"serverKey"`
}

type kafkaUserEntry struct {
	UID   string                     `json:"uid"`
	Scram map[string]scramCredential `json:"scram"`
	ACLs  []struct {
		Resource struct {
			Type        string `json:"type"`
			Name        string `json:"name"`
			PatternType string `json:"patternType"`
		} `json:"resource"`
		Operations []string `json:"operations"`
		Host       string   `json:"host"`
		Type       string   `json:"type"`
	} `json:"acls"`
	Quotas struct {
		ProducerByteRate  int64 `json:"producerByteRate"`
		RequestPercentage int   `json:"requestPercentage"`
	} `json:"quotas"`
}

type kafkaUsersFile struct {
	Revision uint64                    `json:"revision"`
	Users    map[string]kafkaUserEntry `json:"users"`
}

// readUsersFile reads the volume's __cluster/kafka-users.json (empty when there is none yet).
func readUsersFile(t *testing.T, volume string) kafkaUsersFile {
	t.Helper()
	var f kafkaUsersFile
	b, err := os.ReadFile(filepath.Join(volume, "__cluster", "kafka-users.json"))
	if os.IsNotExist(err) {
		return f
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("kafka-users.json: %v\n%s", err, b)
	}
	return f
}

// scramMatches says whether a SCRAM-SHA-512 credential was derived from password (RFC 5802:
// SaltedPassword = PBKDF2-HMAC-SHA512, ClientKey = HMAC(SaltedPassword, "Client Key"),
// StoredKey = SHA-512(ClientKey)).
func scramMatches(cred scramCredential, password string) bool {
	salt, err := base64.StdEncoding.DecodeString(cred.Salt)
	if err != nil || len(salt) == 0 || cred.Iterations < 4096 {
		return false
	}
	salted, err := pbkdf2.Key(sha512.New, password, salt, cred.Iterations, sha512.Size)
	if err != nil {
		return false
	}
	mac := hmac.New(sha512.New, salted)
	mac.Write([]byte("Client Key"))
	stored := sha512.Sum512(mac.Sum(nil))
	want, err := base64.StdEncoding.DecodeString(cred.StoredKey)
	return err == nil && hmac.Equal(stored[:], want)
}

// checkScram fails the test unless the entry has both mechanisms and its SCRAM-SHA-512
// credential verifies against password.
func checkScram(t *testing.T, user string, entry kafkaUserEntry, password string) {
	t.Helper()
	if _, ok := entry.Scram["SCRAM-SHA-256"]; !ok {
		t.Errorf("%s has no SCRAM-SHA-256 credential: %+v", user, entry.Scram)
	}
	if !scramMatches(entry.Scram["SCRAM-SHA-512"], password) {
		t.Errorf("%s's SCRAM-SHA-512 credential does not verify against its password: %+v", user, entry.Scram)
	}
}
