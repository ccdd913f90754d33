//! The brokers' headless Service's EndpointSlices as the controller's [`ReadyBrokers`]: a
//! broker whose pod is not serving (readiness probe failing: fenced, draining, stuck) is not
//! alive for placement even while its heartbeat stream is still open.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kaas::cluster::ClusterSettings;
use kaas_controller::endpoints::ReadyBrokers;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tracing::{info, warn};

/// The EndpointSlices of one Service, watched.
pub(crate) struct KubeEndpoints {
    store: Store<EndpointSlice>,
    synced: Arc<AtomicBool>,
}

impl std::fmt::Debug for KubeEndpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeEndpoints").finish_non_exhaustive()
    }
}

impl KubeEndpoints {
    pub(crate) fn start(client: kube::Client, namespace: &str, service: &str) -> KubeEndpoints {
        let api: Api<EndpointSlice> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().labels(&format!("kubernetes.io/service-name={service}"));
        let (store, writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        let synced_by_watch = synced.clone();
        let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if !synced_by_watch.swap(true, Ordering::AcqRel) {
                            info!("EndpointSlice watch synced");
                        }
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "EndpointSlice watch error; re-listing"),
                }
            }
        });
        KubeEndpoints { store, synced }
    }
}

impl ReadyBrokers for KubeEndpoints {
    fn ready(&self) -> Option<BTreeSet<i32>> {
        if !self.synced.load(Ordering::Acquire) {
            return None;
        }
        let mut ready = BTreeSet::new();
        for slice in self.store.state() {
            for endpoint in slice.endpoints.iter().flatten() {
                let conditions = endpoint.conditions.as_ref();
                // The headless Service publishes not-ready addresses, which makes `ready`
                // always true; `serving` still follows the pod's readiness.
                let serving = conditions.and_then(|c| c.serving.or(c.ready)).unwrap_or(false);
                let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
                let id = endpoint.target_ref.as_ref().and_then(|r| r.name.as_deref()).and_then(ClusterSettings::broker_id_of);
                if let (true, false, Some(id)) = (serving, terminating, id) {
                    ready.insert(id);
                }
            }
        }
        Some(ready)
    }
}
