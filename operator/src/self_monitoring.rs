//! The operator's own PodMonitors — its manager replicas and every volume agent — applied by the
//! leading manager where the Prometheus Operator's CRD exists. `config/prometheus` carries the
//! same objects for kustomize installs; an OLM bundle cannot carry objects of an optional CRD,
//! so without this an OLM install would go unscraped.

use std::future::Future;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use tracing::{debug, warn};

use crate::FIELD_MANAGER;
use crate::crdgen;

/// How often the monitors are applied again: the CRD may be installed after the operator, and
/// a deleted monitor comes back.
const INTERVAL: Duration = Duration::from_secs(30);

/// Applies the operator's PodMonitors in `namespace` every [`INTERVAL`] until `stop`.
pub async fn keep_applied(client: Client, namespace: String, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut ticker = tokio::time::interval(INTERVAL);
    loop {
        tokio::select! {
            _ = ticker.tick() => apply(&client, &namespace).await,
            _ = &mut stop => return,
        }
    }
}

async fn apply(client: &Client, namespace: &str) {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", "v1", "PodMonitor"),
        "podmonitors",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    for (_, monitor) in crdgen::pod_monitors_in(namespace) {
        let Some(name) = monitor["metadata"]["name"].as_str() else {
            continue;
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api.patch(name, &params, &Patch::Apply(&monitor)).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                debug!("no PodMonitor CRD: the Prometheus Operator is not installed");
                return;
            }
            Err(e) => warn!(error = %e, monitor = name, "cannot apply the operator's PodMonitor"),
        }
    }
}
