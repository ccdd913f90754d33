//! Which KafkaClusters this install of the operator reconciles.
//!
//! An install watches every namespace, or only those of `--watch-namespaces` (OLM passes its
//! `olm.targetNamespaces`). Two installs may watch the same namespace (a cluster-wide one and a
//! namespace-scoped one beside it); they must never both reconcile one cluster, so each cluster
//! is claimed by one install in the annotation `kaas.dev/operator` (`<namespace>/<scope>` of the
//! install). The claim is a conditional write (it carries the resourceVersion read), so of two
//! installs racing for an unclaimed cluster exactly one wins; the other sees the claim on its
//! next reconcile and leaves the cluster alone. A namespace-scoped install outranks a
//! cluster-wide one: installing an operator for a namespace takes its clusters over.

use kaas_shared::crd::KafkaCluster;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::Result;

/// The annotation naming the install that reconciles a KafkaCluster.
pub const CLAIM_ANNOTATION: &str = "kaas.dev/operator";

/// This install: where it runs and what it watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    /// The operator's own namespace (one install per namespace: its Lease is there).
    pub namespace: String,
    /// The namespaces it watches; empty: all.
    pub watched: Vec<String>,
}

/// What an install does with a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// It is this install's: reconcile it.
    Ours,
    /// Unclaimed, or claimed by a cluster-wide install this namespace-scoped one outranks:
    /// claim it, then reconcile it.
    Take,
    /// Another install reconciles it.
    Theirs(String),
}

const ALL_NAMESPACES: &str = "all-namespaces";
const NAMESPACED: &str = "namespaced";

impl Install {
    /// An install from `--watch-namespaces` (empty entries ignored).
    pub fn new(namespace: &str, watched: &[String]) -> Install {
        let mut watched: Vec<String> = watched
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        watched.sort();
        watched.dedup();
        Install {
            namespace: namespace.to_owned(),
            watched,
        }
    }

    /// Whether it watches only some namespaces.
    pub fn is_namespaced(&self) -> bool {
        !self.watched.is_empty()
    }

    /// The claim annotation's value for this install.
    pub fn claim_value(&self) -> String {
        let scope = if self.is_namespaced() {
            NAMESPACED
        } else {
            ALL_NAMESPACES
        };
        format!("{}/{scope}", self.namespace)
    }

    /// What to do with a cluster whose claim annotation is `claim`.
    pub fn decide(&self, claim: Option<&str>) -> Claim {
        let mine = self.claim_value();
        match claim {
            None | Some("") => Claim::Take,
            Some(c) if c == mine => Claim::Ours,
            Some(c) if self.is_namespaced() && c.ends_with(&format!("/{ALL_NAMESPACES}")) => {
                Claim::Take
            }
            Some(c) => Claim::Theirs(c.to_owned()),
        }
    }
}

/// Claims `kc` for `install`: a merge patch carrying the resourceVersion read, so the API
/// server refuses it (409) if anyone, another install's claim included, wrote in between.
/// Returns whether the claim was written.
pub async fn claim(client: &Client, kc: &KafkaCluster, install: &Install) -> Result<bool> {
    let api: Api<KafkaCluster> = Api::namespaced(
        client.clone(),
        kc.namespace().as_deref().unwrap_or_default(),
    );
    let patch = json!({"metadata": {
        "resourceVersion": kc.resource_version(),
        "annotations": {CLAIM_ANNOTATION: install.claim_value()},
    }});
    match api
        .patch(
            &kc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_install_per_cluster_and_namespaced_installs_outrank_cluster_wide_ones() {
        let global = Install::new("kaas-system", &[String::new()]);
        let team = Install::new("team-a", &["team-a".to_owned(), " ".to_owned()]);
        assert!(!global.is_namespaced() && team.is_namespaced());
        assert_eq!(global.claim_value(), "kaas-system/all-namespaces");
        assert_eq!(team.claim_value(), "team-a/namespaced");
        // Unclaimed: either may take it (the conditional write picks one).
        assert_eq!(global.decide(None), Claim::Take);
        assert_eq!(team.decide(None), Claim::Take);
        // Claimed by the cluster-wide install: the namespaced one takes it over...
        assert_eq!(
            global.decide(Some("kaas-system/all-namespaces")),
            Claim::Ours
        );
        assert_eq!(team.decide(Some("kaas-system/all-namespaces")), Claim::Take);
        // ...and the cluster-wide one leaves it alone from then on.
        assert_eq!(
            global.decide(Some("team-a/namespaced")),
            Claim::Theirs("team-a/namespaced".into())
        );
        assert_eq!(team.decide(Some("team-a/namespaced")), Claim::Ours);
        // Another namespaced install's cluster, or another cluster-wide install's, is theirs.
        let other = Install::new("team-b", &["team-a".to_owned()]);
        assert_eq!(
            other.decide(Some("team-a/namespaced")),
            Claim::Theirs("team-a/namespaced".into())
        );
        let global2 = Install::new("kaas-system-2", &[]);
        assert_eq!(
            global2.decide(Some("kaas-system/all-namespaces")),
            Claim::Theirs("kaas-system/all-namespaces".into())
        );
    }
}
