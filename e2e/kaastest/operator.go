package kaastest

import (
	"path/filepath"
	"strings"
	"time"

	"kaas/e2e/harness"
)

// OperatorNamespace is where config/default installs the operator.
const OperatorNamespace = "kaas-system"

// BrokerPods are the uids of cluster kc's broker pods and its StatefulSet's generation: both
// unchanged means no broker restarted and the StatefulSet was not rewritten.
func BrokerPods(c *harness.Cluster) (uids, generation string) {
	out, _ := c.Kubectl("-n", Namespace, "get", "pods", "-l", "app.kubernetes.io/component=broker", "-o", "jsonpath={.items[*].metadata.uid}")
	return strings.TrimSpace(out), c.JSONPath(Namespace, "statefulset", "kc", ".metadata.generation")
}

// UpgradeOperator does to a running install what an upgrade changes around the brokers, the way
// the next bundle applies it: the CRDs again (from the repository at root), and the manager's
// Deployment on the image next. It returns once the new manager has taken the volume agent of
// cluster kc to next and kc is Reconciled and Ready. The harness runs the same binary for every
// tag, so this checks the rollout and the adoption, not a different rendering (that a newer
// rendering keeps the live pod template is a unit test in the operator's resources.rs).
func UpgradeOperator(c *harness.Cluster, root, next string) {
	c.MustKubectl("apply", "-k", filepath.Join(root, "config", "crd"))
	c.MustKubectl("-n", OperatorNamespace, "set", "image", "deployment/kaas-operator", "manager="+next)
	c.MustKubectl("-n", OperatorNamespace, "set", "env", "deployment/kaas-operator", "KAAS_AGENT_IMAGE="+next)
	c.MustKubectl("-n", OperatorNamespace, "rollout", "status", "deployment/kaas-operator", "--timeout=3m")
	// The agent's Deployment is Recreate: one agent at a time, fenced by its Lease.
	c.WaitJSONPath(2*time.Minute, Namespace, "deployment", "kc-volume-agent", ".spec.template.spec.containers[0].image", next)
	c.WaitJSONPath(2*time.Minute, Namespace, "deployment", "kc-volume-agent", ".status.readyReplicas", "1")
	c.WaitJSONPath(time.Minute, Namespace, "kafkacluster", "kc", `.status.conditions[?(@.type=="Reconciled")].status`, "True")
	c.WaitJSONPath(time.Minute, Namespace, "kafkacluster", "kc", `.status.conditions[?(@.type=="Ready")].status`, "True")
}
