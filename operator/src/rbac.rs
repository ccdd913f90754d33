//! The RBAC rules, in one place: what brokers use, what the volume agent uses, and what the
//! operator itself needs (which includes everything it grants, since Kubernetes refuses to let
//! anyone grant permissions they do not hold). `crdgen` renders the operator's rules into
//! `config/rbac/role.yaml` and the bundle's CSV from this same table.

use k8s_openapi::api::rbac::v1::PolicyRule;

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|s| (*s).to_owned()).collect()),
        verbs: verbs.iter().map(|s| (*s).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

/// Exactly the verbs a broker uses: the controller Lease; KafkaTopics (watched, and created,
/// patched, deleted for Kafka-API topic admin); EndpointSlices (the alive set); the assignment
/// mirror; events; and its KafkaCluster, read for the uid that owns the Lease, the mirror and
/// the topics it creates (looked up rather than passed in the pod template, whose change would
/// restart every broker on an operator upgrade).
pub fn broker_rules() -> Vec<PolicyRule> {
    vec![
        rule("kaas.dev", &["kafkaclusters"], &["get"]),
        rule(
            "coordination.k8s.io",
            &["leases"],
            &["get", "create", "update", "patch"],
        ),
        rule(
            "kaas.dev",
            &["kafkatopics"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule("discovery.k8s.io", &["endpointslices"], &["list", "watch"]),
        rule(
            "kaas.dev",
            &["kafkaclusterassignments"],
            &["create", "patch"],
        ),
        // The controller broker's status publication (traffic, sizes, groups).
        rule(
            "kaas.dev",
            &["kafkaclusters/status", "kafkatopics/status"],
            &["patch"],
        ),
        rule("", &["events"], &["create"]),
    ]
}

/// What a cluster's volume agent uses: read its topics and users, write their status, read its
/// cluster (for its `assignment.json` path nothing else is needed), keep its users' Secrets,
/// record events, and hold its Lease (conditional `update`s; never `delete`).
pub fn volume_agent_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            "coordination.k8s.io",
            &["leases"],
            &["get", "create", "update"],
        ),
        rule(
            "kaas.dev",
            &["kafkatopics", "kafkausers"],
            &["get", "list", "watch"],
        ),
        rule(
            "kaas.dev",
            &["kafkatopics/status", "kafkausers/status"],
            &["get", "patch"],
        ),
        // Users' Secrets (created, patched when a password or certificate changes, deleted when
        // the user's authentication type needs none), the password Secrets users name and the
        // clients CA; no list or watch: it reads only the Secrets it is named.
        rule("", &["secrets"], &["get", "create", "patch", "delete"]),
        rule("kaas.dev", &["kafkaclusters"], &["get"]),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
    ]
}

/// The operator's ClusterRole (a cluster-wide install): [`namespaced_operator_rules`] in every
/// namespace and [`cluster_scoped_operator_rules`].
pub fn operator_rules() -> Vec<PolicyRule> {
    let mut rules = namespaced_operator_rules();
    rules.extend(cluster_scoped_operator_rules());
    rules
}

/// What the operator reads outside any namespace. A namespace-scoped install may go without
/// (the status diagnosis then does not say whether a Pending claim's StorageClass exists).
pub fn cluster_scoped_operator_rules() -> Vec<PolicyRule> {
    // To say whether a Pending claim's StorageClass exists (status diagnosis).
    vec![rule("storage.k8s.io", &["storageclasses"], &["get"])]
}

/// What the operator uses in each namespace it watches: a namespace-scoped install's Role
/// there (and in its own namespace, for its Lease).
pub fn namespaced_operator_rules() -> Vec<PolicyRule> {
    const MANAGE: &[&str] = &[
        "get", "list", "watch", "create", "patch", "update", "delete",
    ];
    vec![
        rule(
            "kaas.dev",
            &["kafkaclusters"],
            &["get", "list", "watch", "patch"],
        ),
        rule(
            "kaas.dev",
            &["kafkaclusters/status", "kafkatopics/status"],
            &["get", "patch"],
        ),
        rule(
            "kaas.dev",
            &["kafkatopics"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        // Not used by the manager: granted to the volume agents, so held.
        rule("kaas.dev", &["kafkausers"], &["get", "list", "watch"]),
        rule("kaas.dev", &["kafkausers/status"], &["get", "patch"]),
        rule(
            "kaas.dev",
            &["kafkaclusterassignments"],
            &["get", "list", "watch", "create", "patch"],
        ),
        rule("apps", &["statefulsets", "deployments"], MANAGE),
        rule(
            "",
            // configmaps: the external listener's addresses, which brokers mount.
            &["services", "serviceaccounts", "persistentvolumeclaims", "configmaps"],
            MANAGE,
        ),
        rule("", &["pods"], &["get", "list", "watch"]),
        // The cluster CA and the listener certificates it issues (`listener.tls` without a
        // secretName); no list or watch: it reads only the Secrets it names. `delete` is not used
        // by the manager: granted to the volume agents (users' Secrets), so held.
        rule("", &["secrets"], &["get", "create", "patch", "delete"]),
        // list: the StatefulSet's FailedCreate events explain a broker pod that does not exist.
        rule("", &["events"], &["create", "patch", "list"]),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
        rule(
            "rbac.authorization.k8s.io",
            &["roles", "rolebindings"],
            MANAGE,
        ),
        rule("policy", &["poddisruptionbudgets"], MANAGE),
        // ingresses: the external listener of type ingress.
        rule("networking.k8s.io", &["networkpolicies", "ingresses"], MANAGE),
        // The manager's own Lease (leader election), and to grant them to brokers and agents.
        rule(
            "coordination.k8s.io",
            &["leases"],
            &["get", "create", "update", "patch"],
        ),
        rule("discovery.k8s.io", &["endpointslices"], &["list", "watch"]),
        // Each cluster's PodMonitor, where the Prometheus Operator is installed.
        rule(
            "monitoring.coreos.com",
            &["podmonitors"],
            &["get", "create", "patch"],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
        rules.iter().any(|r| {
            r.api_groups
                .as_ref()
                .is_some_and(|g| g.iter().any(|g| g == group))
                && r.resources
                    .as_ref()
                    .is_some_and(|rs| rs.iter().any(|rs| rs == resource))
                && r.verbs.iter().any(|v| v == verb)
        })
    }

    /// Kubernetes refuses a Role that grants more than its creator holds: a cluster-wide
    /// install holds it everywhere, a namespace-scoped one in the namespaces it watches.
    #[test]
    fn the_operator_holds_everything_it_grants() {
        for holder in [operator_rules(), namespaced_operator_rules()] {
            for granted in broker_rules().into_iter().chain(volume_agent_rules()) {
                for group in granted.api_groups.iter().flatten() {
                    for resource in granted.resources.iter().flatten() {
                        for verb in &granted.verbs {
                            assert!(
                                allows(&holder, group, resource, verb),
                                "{group}/{resource} {verb}"
                            );
                        }
                    }
                }
            }
        }
        assert!(!allows(
            &namespaced_operator_rules(),
            "storage.k8s.io",
            "storageclasses",
            "get"
        ));
        assert!(allows(
            &operator_rules(),
            "storage.k8s.io",
            "storageclasses",
            "get"
        ));
    }

    #[test]
    fn brokers_cannot_touch_what_they_do_not_use() {
        let b = broker_rules();
        assert!(allows(&b, "coordination.k8s.io", "leases", "patch"));
        assert!(!allows(&b, "coordination.k8s.io", "leases", "delete"));
        assert!(allows(&b, "kaas.dev", "kafkaclusters", "get"));
        assert!(!allows(&b, "kaas.dev", "kafkaclusters", "list"));
        assert!(!allows(&b, "kaas.dev", "kafkaclusters", "patch"));
        assert!(!allows(&b, "", "secrets", "get"));
        assert!(!allows(&b, "discovery.k8s.io", "endpointslices", "get"));
        assert!(!allows(&b, "kaas.dev", "kafkausers", "get"));
    }

    #[test]
    fn the_volume_agent_keeps_users_and_their_secrets_but_lists_no_secret() {
        let a = volume_agent_rules();
        for verb in ["get", "list", "watch"] {
            assert!(allows(&a, "kaas.dev", "kafkausers", verb), "{verb}");
        }
        assert!(allows(&a, "kaas.dev", "kafkausers/status", "patch"));
        assert!(!allows(&a, "kaas.dev", "kafkausers", "patch"));
        for verb in ["get", "create", "patch", "delete"] {
            assert!(allows(&a, "", "secrets", verb), "{verb}");
        }
        for verb in ["list", "watch", "update"] {
            assert!(!allows(&a, "", "secrets", verb), "{verb}");
        }
    }
}
