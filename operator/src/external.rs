//! The external listener (`listener.external`): its Services, and the addresses brokers announce
//! on it.
//!
//! One Service per broker (selecting that broker's pod by the StatefulSet's pod-name label) and
//! a bootstrap Service over all of them, of type NodePort or LoadBalancer. A broker's external
//! address is its override if the spec gives one, else its load balancer's ingress or its
//! node's address (the pod's `status.hostIP`) with its node port. The operator writes the
//! addresses it knows into the ConfigMap brokers mount (`kaas_shared::external_addresses`); the
//! kubelet refreshes the mounted file and brokers read it every second, so an address that
//! appears or changes (a load balancer provisioned, a pod moved to another node) restarts no
//! broker.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kaas_shared::crd::KafkaCluster;
use kaas_shared::crd::cluster::{ExternalListener, ExternalListenerType};
use kaas_shared::external_addresses::{ExternalAddress, ExternalAddresses, FILE_NAME};
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::resources::{self, Names};
use crate::{Error, Result};

/// The port an ingress controller passes TLS through on.
const INGRESS_PORT: u16 = 443;
/// ingress-nginx's annotation for TLS passthrough by server name (the controller must run with
/// `--enable-ssl-passthrough`).
const SSL_PASSTHROUGH: &str = "nginx.ingress.kubernetes.io/ssl-passthrough";
/// Where brokers mount the addresses ConfigMap.
pub const ADDRESSES_DIR: &str = "/etc/kaas/external";
/// The label the StatefulSet controller puts on each pod: its name.
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The component label of the external Services (listed to remove those no longer wanted).
const COMPONENT: &str = "external";

/// The bootstrap Service's name.
pub fn bootstrap_name(names: &Names) -> String {
    format!("{}-external-bootstrap", names.cluster)
}

/// Broker `ordinal`'s Service's name.
pub fn broker_service_name(names: &Names, ordinal: i32) -> String {
    format!("{}-external-{ordinal}", names.cluster)
}

/// The ConfigMap of the brokers' external addresses.
pub fn addresses_config_map_name(names: &Names) -> String {
    format!("{}-external-addresses", names.cluster)
}

fn service_type(external: &ExternalListener) -> &'static str {
    match external.kind {
        ExternalListenerType::Nodeport => "NodePort",
        ExternalListenerType::Loadbalancer => "LoadBalancer",
        // Reached through the ingress controller only.
        ExternalListenerType::Ingress => "ClusterIP",
    }
}

/// The external Services a cluster wants: the bootstrap one first, then one per broker.
pub fn services(
    kc: &KafkaCluster,
    names: &Names,
    external: &ExternalListener,
) -> Result<Vec<Service>> {
    let service = |name: String,
                   selector: BTreeMap<String, String>,
                   node_port: Option<i32>,
                   annotations: &BTreeMap<String, String>| {
        let mut meta = resources::meta(kc, names, &name, COMPONENT);
        let mut all = external.annotations.clone();
        all.extend(annotations.clone());
        if !all.is_empty() {
            meta["annotations"] = json!(all);
        }
        let mut port = json!({"name": "external", "port": external.port, "targetPort": "external"});
        if let Some(node_port) = node_port {
            port["nodePort"] = json!(node_port);
        }
        serde_json::from_value::<Service>(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": meta,
            // NB: Cluster (not Local) external traffic policy: any node forwards to the broker,
            // so a broker's announced node address need not be the node it runs on.
            "spec": {"type": service_type(external), "selector": selector, "ports": [port]},
        }))
        .map_err(|source| Error::Serialize {
            what: "external service",
            source,
        })
    };
    let bootstrap = external.bootstrap.clone().unwrap_or_default();
    let mut out = vec![service(
        bootstrap_name(names),
        resources::selector(names, "broker"),
        bootstrap.node_port,
        &bootstrap.annotations,
    )?];
    for ordinal in 0..kc.spec.replicas {
        let mut selector = resources::selector(names, "broker");
        selector.insert(
            POD_NAME_LABEL.to_owned(),
            format!("{}-{ordinal}", names.cluster),
        );
        let settings = external.brokers.iter().find(|b| b.broker == ordinal);
        let annotations = settings.map(|b| b.annotations.clone()).unwrap_or_default();
        out.push(service(
            broker_service_name(names, ordinal),
            selector,
            settings.and_then(|b| b.node_port),
            &annotations,
        )?);
    }
    Ok(out)
}

/// The external Ingresses (type ingress): the bootstrap one first, then one per broker, each
/// routing its host to the Service of the same name, TLS passed through.
pub fn ingresses(
    kc: &KafkaCluster,
    names: &Names,
    external: &ExternalListener,
) -> Result<Vec<Ingress>> {
    let ingress = |name: String, host: &str, annotations: &BTreeMap<String, String>| {
        let mut meta = resources::meta(kc, names, &name, COMPONENT);
        let mut all = BTreeMap::from([(SSL_PASSTHROUGH.to_owned(), "true".to_owned())]);
        all.extend(external.annotations.clone());
        all.extend(annotations.clone());
        meta["annotations"] = json!(all);
        let backend = json!({"service": {"name": name, "port": {"number": external.port}}});
        let mut spec = json!({
            "tls": [{"hosts": [host]}],
            "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}],
        });
        if let Some(class) = &external.class {
            spec["ingressClassName"] = json!(class);
        }
        serde_json::from_value::<Ingress>(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": spec,
        }))
        .map_err(|source| Error::Serialize {
            what: "external ingress",
            source,
        })
    };
    let bootstrap = external.bootstrap.clone().unwrap_or_default();
    // NB: the CRD requires the hosts for type ingress; a missing one (an object stored before
    // the rule) gets no Ingress, and its broker no address.
    let mut out = Vec::new();
    if let Some(host) = &bootstrap.host {
        out.push(ingress(
            bootstrap_name(names),
            host,
            &bootstrap.annotations,
        )?);
    }
    for ordinal in 0..kc.spec.replicas {
        let settings = external.brokers.iter().find(|b| b.broker == ordinal);
        if let Some((host, annotations)) =
            settings.and_then(|b| Some((b.host.as_ref()?, &b.annotations)))
        {
            out.push(ingress(
                broker_service_name(names, ordinal),
                host,
                annotations,
            )?);
        }
    }
    Ok(out)
}

/// Where a Service is reached from outside: its load balancer's first ingress (IP or host name)
/// at the Service port, or `node` at its node port.
fn service_address(
    external: &ExternalListener,
    service: &Service,
    node: Option<&str>,
) -> Option<ExternalAddress> {
    let port = service.spec.as_ref()?.ports.as_ref()?.first()?;
    match external.kind {
        ExternalListenerType::Loadbalancer => {
            let ingress = service
                .status
                .as_ref()?
                .load_balancer
                .as_ref()?
                .ingress
                .as_ref()?
                .first()?;
            let host = ingress.ip.clone().or_else(|| ingress.hostname.clone())?;
            Some(ExternalAddress {
                host,
                port: u16::try_from(port.port).ok()?,
            })
        }
        ExternalListenerType::Nodeport => Some(ExternalAddress {
            host: node?.to_owned(),
            port: u16::try_from(port.node_port?).ok()?,
        }),
        // Not reached directly: clients dial the Ingress's host.
        ExternalListenerType::Ingress => None,
    }
}

/// Where clients dial an Ingress of the external listener: its host, at the ingress
/// controller's TLS port.
fn ingress_address(host: Option<&String>) -> Option<ExternalAddress> {
    host.map(|host| ExternalAddress {
        host: host.clone(),
        port: INGRESS_PORT,
    })
}

/// Every broker's external address that is known: `services[i]` is broker i's live Service and
/// `nodes[i]` the address of the node its pod runs on. An override's host or port wins.
pub fn addresses(
    external: &ExternalListener,
    services: &[Service],
    nodes: &[Option<String>],
) -> ExternalAddresses {
    let mut out = ExternalAddresses::default();
    for (ordinal, service) in services.iter().enumerate() {
        let Ok(id) = i32::try_from(ordinal) else {
            break;
        };
        let settings = external.brokers.iter().find(|b| b.broker == id);
        let found = match external.kind {
            ExternalListenerType::Ingress => {
                ingress_address(settings.and_then(|b| b.host.as_ref()))
            }
            _ => service_address(
                external,
                service,
                nodes.get(ordinal).and_then(Option::as_deref),
            ),
        };
        let host = settings
            .and_then(|b| b.advertised_host.clone())
            .or_else(|| found.as_ref().map(|a| a.host.clone()));
        let port = settings
            .and_then(|b| b.advertised_port)
            .and_then(|p| u16::try_from(p).ok())
            .or_else(|| found.as_ref().map(|a| a.port));
        if let (Some(host), Some(port)) = (host, port) {
            out.brokers.insert(id, ExternalAddress { host, port });
        }
    }
    out
}

/// `host:port,...` clients outside bootstrap from: the bootstrap load balancer, or every node a
/// broker runs on at the bootstrap node port; `None` until known.
pub fn bootstrap_servers(
    external: &ExternalListener,
    bootstrap: &Service,
    nodes: &[Option<String>],
) -> Option<String> {
    let hosts: BTreeSet<&str> = nodes.iter().flatten().map(String::as_str).collect();
    let addresses: Vec<ExternalAddress> = match external.kind {
        ExternalListenerType::Loadbalancer => service_address(external, bootstrap, None)
            .into_iter()
            .collect(),
        ExternalListenerType::Nodeport => hosts
            .into_iter()
            .filter_map(|h| service_address(external, bootstrap, Some(h)))
            .collect(),
        ExternalListenerType::Ingress => {
            ingress_address(external.bootstrap.as_ref().and_then(|b| b.host.as_ref()))
                .into_iter()
                .collect()
        }
    };
    let joined: Vec<String> = addresses
        .iter()
        .map(|a| {
            if a.host.contains(':') {
                format!("[{}]:{}", a.host, a.port)
            } else {
                format!("{}:{}", a.host, a.port)
            }
        })
        .collect();
    (!joined.is_empty()).then(|| joined.join(","))
}

/// The ConfigMap brokers mount.
pub fn addresses_config_map(
    kc: &KafkaCluster,
    names: &Names,
    addresses: &ExternalAddresses,
) -> Result<ConfigMap> {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": resources::meta(kc, names, &addresses_config_map_name(names), COMPONENT),
        "data": {FILE_NAME: addresses.to_json()},
    }))
    .map_err(|source| Error::Serialize {
        what: "external addresses config map",
        source,
    })
}

/// What [`reconcile`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// `status.externalBootstrapServers`.
    pub bootstrap_servers: Option<String>,
    /// Some broker has no external address yet (a load balancer or a pod pending): look again soon.
    pub incomplete: bool,
    /// Every host clients outside dial (brokers' and bootstrap's), for the listener certificate.
    pub hosts: Vec<String>,
}

/// Applies the external Services and the addresses ConfigMap the spec asks for, and removes
/// those it no longer asks for (a smaller cluster, or no external listener).
pub async fn reconcile(client: &Client, kc: &KafkaCluster, names: &Names) -> Result<Outcome> {
    let service_api: Api<Service> = Api::namespaced(client.clone(), &names.namespace);
    let wanted = match &kc.spec.listener.external {
        Some(external) => services(kc, names, external)?,
        None => Vec::new(),
    };
    let keep: BTreeSet<String> = wanted.iter().map(ResourceExt::name_any).collect();
    let selector = resources::selector_string(names, COMPONENT);
    let mut removed = 0;
    let wanted_ingresses = match &kc.spec.listener.external {
        Some(external) if external.kind == ExternalListenerType::Ingress => {
            ingresses(kc, names, external)?
        }
        _ => Vec::new(),
    };
    let ingress_api: Api<Ingress> = Api::namespaced(client.clone(), &names.namespace);
    // NB: listed only where an external listener is or was (its Services were there), so a
    // cluster without one costs one list call, of Services.
    let mut stale_ingresses = Vec::new();
    let listed = service_api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    if kc.spec.listener.external.is_some() || !listed.is_empty() {
        let keep_ingresses: BTreeSet<String> =
            wanted_ingresses.iter().map(ResourceExt::name_any).collect();
        stale_ingresses = ingress_api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .into_iter()
            .map(|i| i.name_any())
            .filter(|name| !keep_ingresses.contains(name))
            .collect();
    }
    for name in stale_ingresses {
        info!(ingress = %name, "removing an external Ingress the spec no longer asks for");
        delete_ignoring_missing(&ingress_api, &name).await?;
    }
    for stale in listed {
        if !keep.contains(&stale.name_any()) {
            info!(service = %stale.name_any(), "removing an external Service the spec no longer asks for");
            delete_ignoring_missing(&service_api, &stale.name_any()).await?;
            removed += 1;
        }
    }
    let Some(external) = &kc.spec.listener.external else {
        // NB: only when the listener was just removed (its Services were there), so a cluster
        // without one costs no call; a ConfigMap left by a failed delete is owned by the
        // cluster, mounted by nobody, and goes with it.
        if removed > 0 {
            let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &names.namespace);
            delete_ignoring_missing(&config_maps, &addresses_config_map_name(names)).await?;
        }
        return Ok(Outcome::default());
    };
    let mut live = Vec::with_capacity(wanted.len());
    for service in &wanted {
        live.push(crate::cluster::apply(client, &names.namespace, service).await?);
    }
    for ingress in &wanted_ingresses {
        crate::cluster::apply(client, &names.namespace, ingress).await?;
    }
    // One list of the broker pods, not a read per broker.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &names.namespace);
    let selector = resources::selector_string(names, "broker");
    let host_ips: BTreeMap<String, String> = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter_map(|p| Some((p.name_any(), p.status?.host_ip.filter(|ip| !ip.is_empty())?)))
        .collect();
    let nodes: Vec<Option<String>> = (0..kc.spec.replicas)
        .map(|ordinal| {
            host_ips
                .get(&format!("{}-{ordinal}", names.cluster))
                .cloned()
        })
        .collect();
    let (bootstrap, brokers) = live
        .split_first()
        .ok_or(Error::MissingField("the external bootstrap Service"))?;
    let known = addresses(external, brokers, &nodes);
    let incomplete = known.brokers.len() < brokers.len();
    crate::cluster::apply(
        client,
        &names.namespace,
        &addresses_config_map(kc, names, &known)?,
    )
    .await?;
    let mut hosts: BTreeSet<String> = known.brokers.values().map(|a| a.host.clone()).collect();
    hosts.extend(service_address(external, bootstrap, None).map(|a| a.host));
    hosts.extend(external.bootstrap.as_ref().and_then(|b| b.host.clone()));
    // NB: node addresses only where clients dial them (the bootstrap node port), so that a pod
    // moving nodes re-issues no certificate of a load-balancer or ingress listener.
    if external.kind == ExternalListenerType::Nodeport {
        hosts.extend(nodes.iter().flatten().cloned());
    }
    Ok(Outcome {
        bootstrap_servers: bootstrap_servers(external, bootstrap, &nodes),
        incomplete,
        hosts: hosts.into_iter().collect(),
    })
}

async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
