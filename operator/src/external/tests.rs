use super::*;
use crate::resources::tests::cluster;

fn external_cluster(external: serde_json::Value) -> KafkaCluster {
    cluster(json!({
        "replicas": 2, "version": "0.1.0", "storage": {"existingClaim": "shared"},
        "listener": {"external": external},
    }))
}

fn external_of(kc: &KafkaCluster) -> &ExternalListener {
    kc.spec.listener.external.as_ref().unwrap()
}

/// A Service as the API server returns it: node ports allocated, a load balancer's ingress.
fn live(mut service: Service, node_port: i32, ingress: Option<&str>) -> Service {
    let spec = service.spec.as_mut().unwrap();
    spec.ports.as_mut().unwrap()[0]
        .node_port
        .get_or_insert(node_port);
    if let Some(ip) = ingress {
        service.status =
            serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": ip}]}})).unwrap();
    }
    service
}

#[test]
fn one_service_per_broker_and_a_bootstrap_one_selecting_the_right_pods() {
    let kc = external_cluster(json!({
        "type": "nodeport",
        "bootstrap": {"nodePort": 32100},
        "brokers": [{"broker": 1, "nodePort": 32001, "annotations": {"b": "1"}}],
        "annotations": {"all": "yes"},
    }));
    let names = Names::of(&kc).unwrap();
    let services = services(&kc, &names, external_of(&kc)).unwrap();
    let names_of: Vec<String> = services.iter().map(ResourceExt::name_any).collect();
    assert_eq!(
        names_of,
        [
            "prod-external-bootstrap",
            "prod-external-0",
            "prod-external-1"
        ]
    );
    let spec = |i: usize| services[i].spec.clone().unwrap();
    assert_eq!(spec(0).type_.as_deref(), Some("NodePort"));
    assert_eq!(spec(0).ports.unwrap()[0].node_port, Some(32100));
    assert_eq!(
        spec(1).ports.unwrap()[0].node_port,
        None,
        "Kubernetes picks broker 0's"
    );
    assert_eq!(spec(2).ports.unwrap()[0].node_port, Some(32001));
    assert_eq!(
        spec(0).selector.unwrap().get(POD_NAME_LABEL),
        None,
        "bootstrap selects every broker"
    );
    assert_eq!(
        spec(2)
            .selector
            .unwrap()
            .get(POD_NAME_LABEL)
            .map(String::as_str),
        Some("prod-1")
    );
    assert_eq!(
        spec(2)
            .selector
            .unwrap()
            .get("app.kubernetes.io/component")
            .map(String::as_str),
        Some("broker")
    );
    let annotations = services[2].metadata.annotations.clone().unwrap();
    assert_eq!(
        (annotations["all"].as_str(), annotations["b"].as_str()),
        ("yes", "1")
    );
    assert_eq!(
        services[0].metadata.owner_references.as_ref().map(Vec::len),
        Some(1),
        "owned by the cluster"
    );
}

#[test]
fn node_port_addresses_are_the_pods_nodes_and_overrides_win() {
    let kc = external_cluster(json!({
        "type": "nodeport",
        "brokers": [{"broker": 1, "advertisedHost": "kafka-1.example.com"}],
    }));
    let names = Names::of(&kc).unwrap();
    let external = external_of(&kc);
    let services = services(&kc, &names, external).unwrap();
    let live: Vec<Service> = services
        .into_iter()
        .zip([32100, 31000, 31001])
        .map(|(s, p)| live(s, p, None))
        .collect();
    // Broker 0's pod is not scheduled yet: no address, so it is not announced.
    let nodes = [None, Some("10.0.0.12".to_string())];
    let known = addresses(external, &live[1..], &nodes);
    assert_eq!(known.get(0), None);
    assert_eq!(
        known.get(1),
        Some(&ExternalAddress {
            host: "kafka-1.example.com".into(),
            port: 31001
        })
    );
    assert_eq!(
        bootstrap_servers(external, &live[0], &nodes).as_deref(),
        Some("10.0.0.12:32100")
    );
    let nodes = [Some("10.0.0.11".to_string()), Some("10.0.0.12".to_string())];
    let known = addresses(external, &live[1..], &nodes);
    assert_eq!(
        known.get(0),
        Some(&ExternalAddress {
            host: "10.0.0.11".into(),
            port: 31000
        })
    );
    assert_eq!(
        bootstrap_servers(external, &live[0], &nodes).as_deref(),
        Some("10.0.0.11:32100,10.0.0.12:32100")
    );
}

#[test]
fn load_balancer_addresses_come_from_their_ingress() {
    let kc = external_cluster(
        json!({"type": "loadbalancer", "port": 9094, "brokers": [{"broker": 0, "advertisedPort": 443}]}),
    );
    let names = Names::of(&kc).unwrap();
    let external = external_of(&kc);
    let services = services(&kc, &names, external).unwrap();
    assert_eq!(
        services[0].spec.as_ref().unwrap().type_.as_deref(),
        Some("LoadBalancer")
    );
    let pending: Vec<Service> = services
        .iter()
        .cloned()
        .map(|s| live(s, 30000, None))
        .collect();
    assert_eq!(
        addresses(external, &pending[1..], &[None, None]),
        ExternalAddresses::default(),
        "no ingress yet"
    );
    assert_eq!(bootstrap_servers(external, &pending[0], &[]), None);
    let ready: Vec<Service> = services
        .into_iter()
        .zip(["203.0.113.9", "203.0.113.10", "fd00::11"])
        .map(|(s, ip)| live(s, 30000, Some(ip)))
        .collect();
    let known = addresses(external, &ready[1..], &[None, None]);
    assert_eq!(
        known.get(0),
        Some(&ExternalAddress {
            host: "203.0.113.10".into(),
            port: 443
        })
    );
    assert_eq!(
        known.get(1),
        Some(&ExternalAddress {
            host: "fd00::11".into(),
            port: 9094
        })
    );
    assert_eq!(
        bootstrap_servers(external, &ready[0], &[]).as_deref(),
        Some("203.0.113.9:9094")
    );
}

#[test]
fn the_config_map_holds_what_brokers_read() {
    let kc = external_cluster(json!({"type": "nodeport"}));
    let names = Names::of(&kc).unwrap();
    let mut known = ExternalAddresses::default();
    known.brokers.insert(
        0,
        ExternalAddress {
            host: "10.0.0.11".into(),
            port: 31000,
        },
    );
    let cm = addresses_config_map(&kc, &names, &known).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("prod-external-addresses"));
    let data = cm.data.unwrap();
    assert_eq!(
        ExternalAddresses::from_json(data[FILE_NAME].as_bytes()).unwrap(),
        known
    );
}

#[test]
fn ingress_routes_each_host_to_its_broker_and_announces_the_hosts_at_443() {
    let kc = external_cluster(json!({
        "type": "ingress",
        "class": "nginx",
        "bootstrap": {"host": "bootstrap.kafka.example"},
        "brokers": [{"broker": 0, "host": "b0.kafka.example"}, {"broker": 1, "host": "b1.kafka.example", "annotations": {"x": "y"}}],
    }));
    let names = Names::of(&kc).unwrap();
    let external = external_of(&kc);
    let services = services(&kc, &names, external).unwrap();
    assert!(
        services
            .iter()
            .all(|s| s.spec.as_ref().unwrap().type_.as_deref() == Some("ClusterIP")),
        "reached through the ingress only"
    );
    let ingresses = ingresses(&kc, &names, external).unwrap();
    let route = |i: &Ingress| {
        let spec = i.spec.as_ref().unwrap();
        let rule = &spec.rules.as_ref().unwrap()[0];
        let backend = rule.http.as_ref().unwrap().paths[0]
            .backend
            .service
            .as_ref()
            .unwrap();
        (
            rule.host.clone().unwrap(),
            backend.name.clone(),
            backend.port.as_ref().unwrap().number,
            spec.ingress_class_name.clone(),
        )
    };
    assert_eq!(
        route(&ingresses[0]),
        (
            "bootstrap.kafka.example".into(),
            "prod-external-bootstrap".into(),
            Some(9093),
            Some("nginx".into())
        )
    );
    assert_eq!(
        route(&ingresses[2]),
        (
            "b1.kafka.example".into(),
            "prod-external-1".into(),
            Some(9093),
            Some("nginx".into())
        )
    );
    let annotations = ingresses[2].metadata.annotations.clone().unwrap();
    assert_eq!(annotations[SSL_PASSTHROUGH], "true");
    assert_eq!(annotations["x"], "y");

    let known = addresses(external, &services[1..], &[None, None]);
    assert_eq!(
        known.get(1),
        Some(&ExternalAddress {
            host: "b1.kafka.example".into(),
            port: 443
        })
    );
    assert_eq!(
        bootstrap_servers(external, &services[0], &[]).as_deref(),
        Some("bootstrap.kafka.example:443")
    );
}
