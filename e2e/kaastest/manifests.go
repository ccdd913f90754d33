// Package kaastest holds the kaas manifests the e2e tests apply: a namespace with its shared
// claim and KafkaCluster, and KafkaTopics.
package kaastest

import (
	"fmt"

	"kaas/e2e/harness"
)

// Namespace is the namespace every kaas e2e test deploys into.
const Namespace = "demo"

// Cluster is a Namespace and a 3-broker KafkaCluster `kc` on a claim the operator creates, as
// the README's sample is (`storage: {size, storageClassName}`), with spec lines extra (indented
// two spaces) added. The claim binds to the harness' pre-created volume of its class, so use it
// where the harness has one volume (the default, "shared"). Brokers listen as by default, on
// every address of their pods' own network namespaces, and advertise their pod DNS names
// (`<pod>.kc-brokers.demo.svc`), which the harness' cluster DNS serves.
func Cluster(extra string) string {
	return namespace() + `---` + kafkaCluster("{size: 1Gi, storageClassName: "+harness.StorageClass+"}", extra)
}

// ClusterOnClaim is Cluster on an existing claim of that name (Claim) instead, bound to the
// pre-created volume of the same name: for a harness with several volumes.
func ClusterOnClaim(claim, extra string) string {
	return namespace() + `---` + Claim(claim) + `---` + kafkaCluster("{existingClaim: "+claim+"}", extra)
}

func kafkaCluster(storage, extra string) string {
	return `
apiVersion: kaas.dev/v1alpha1
kind: KafkaCluster
metadata: {name: kc, namespace: ` + Namespace + `}
spec:
  replicas: 3
  version: 0.1.0
  storage: ` + storage + `
` + extra
}

func namespace() string {
	return `
apiVersion: v1
kind: Namespace
metadata: {name: ` + Namespace + `}
`
}

// Claim is an RWX claim in Namespace bound to the harness' pre-created volume of the same name:
// by volumeName, since with several volumes an unnamed claim binds whichever the PV controller picks.
func Claim(name string) string {
	return `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: ` + name + `, namespace: ` + Namespace + `}
spec:
  volumeName: ` + name + `
  accessModes: [ReadWriteMany]
  storageClassName: kaas-e2e-rwx
  resources: {requests: {storage: 1Gi}}
`
}

// Topic is a KafkaTopic of cluster kc; extra continues its spec flow mapping (", config: {...}").
func Topic(name string, partitions int, extra string) string {
	return fmt.Sprintf("apiVersion: kaas.dev/v1alpha1\nkind: KafkaTopic\nmetadata: {name: %s, namespace: %s}\nspec: {clusterRef: kc, partitions: %d%s}\n", name, Namespace, partitions, extra)
}
