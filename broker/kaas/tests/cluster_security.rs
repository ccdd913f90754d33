//! A cluster whose client listeners speak SASL_SSL: a real client (confluent-kafka, i.e.
//! librdkafka) authenticates with SCRAM over TLS and runs transactions across every broker,
//! while the brokers send each other markers and verifications on their inter-broker
//! listeners, which the client listener's TLS and SASL do not stand in the way of. And a
//! cluster with ACLs: a change made through any broker is written by the controller and
//! enforced by every broker; the same for client quotas. And the KafkaUsers the volume agent
//! writes to the volume: they log in, and their ACLs and quotas hold, on every broker.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::TestResult;
use common::cluster::Cluster;
use common::pki::{Pki, add_user, path};
use common::wire::Wire;
use kaas_broker::authz::{AuthzSettings, Policy};
use kaas_broker::config::ListenerSecurity;
use kaas_broker::control_plane::ControlPlane;
use kaas_broker::quota::model::QuotaKey;
use kaas_broker::sasl::credentials::CredentialStore;
use kaas_broker::sasl::scram::ScramHash;
use kaas_broker::sasl::{Mechanism, SaslSettings};
use kaas_broker::tls::{ClientAuth, TlsReloader, TlsSettings};
use kaas_shared::kafka_users::{
    self, AclOperation, AclPatternType, AclPermission, AclResource, AclResourceType, AclRule, KafkaUserEntry, KafkaUsersFile, UserQuotas,
};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, CreateAclsRequest, DeleteAclsRequest, DescribeClientQuotasRequest, MetadataRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const SETTLE: Duration = Duration::from_secs(30);
const PARTITIONS: i32 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactions_span_brokers_whose_clients_use_sasl_ssl() -> TestResult {
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "cluster-ca")?;
    let (cert, key) = pki.leaf("broker", &["localhost", "127.0.0.1"])?;
    let credentials = dir.path().join("users.json");
    add_user(&credentials, "alice", "alice-secret", "SCRAM-SHA-512")?;
    let security = ListenerSecurity {
        tls: Some(Arc::new(TlsReloader::new(TlsSettings { cert, key, client_ca: None, client_auth: ClientAuth::None })?)),
        sasl: Some(SaslSettings {
            mechanisms: vec![Mechanism::Scram(ScramHash::Sha512)],
            credentials: Some(Arc::new(CredentialStore::open(credentials)?)),
            oauth: None,
            reauth: None,
        }),
        authorizer: None,
    };
    let cluster = Cluster::start_secured(3, security).await?;
    cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3 && a.brokers.values().all(|e| e.interbroker.is_some())).await?;

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/secure_transactions.py");
    let (bootstrap, ca) = (cluster.bootstrap(), pki.ca("cluster-ca"));
    let out = tokio::task::spawn_blocking(move || {
        Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
            .arg(script)
            .args([bootstrap.as_str(), "spread", &PARTITIONS.to_string(), path(&ca), "SCRAM-SHA-512", "alice", "alice-secret"])
            .output()
    })
    .await??;
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the transactional client failed:\n{printed}");
    assert!(printed.contains("brokers 3"), "{printed}");
    // Each broker reads its own copy of the users (a mounted Secret): none may change them.
    assert!(printed.contains("scram change: refused INVALID_REQUEST"), "{printed}");
    assert!(printed.contains(&format!("txn ok {}", 2 * PARTITIONS)), "{printed}");

    // The transactions did cross brokers: the topic's partitions are led by all three, so two
    // of them took their markers (and asked for their verifications) over the wire.
    let assignment = cluster.assignment().ok_or("no assignment")?;
    let leaders: BTreeSet<i32> = (0..PARTITIONS).filter_map(|p| assignment.partition("spread", p).map(|a| a.leader)).collect();
    assert_eq!(leaders.len(), 3, "spread's leaders: {leaders:?}");
    Ok(())
}

/// A SASL/PLAIN login on a raw connection.
fn login(address: &str, user: &str, password: &str) -> TestResult<Wire> {
    let (wire, error) = try_login(address, user, password)?;
    assert_eq!(error, 0, "login of {user} on {address}");
    Ok(wire)
}

/// A SASL/PLAIN login: the connection and SaslAuthenticate's error code (0: logged in).
fn try_login(address: &str, user: &str, password: &str) -> TestResult<(Wire, i16)> {
    let mut wire = Wire::connect(address)?;
    let handshake = wire.call(1, &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")))?;
    assert_eq!(handshake.error_code, 0, "handshake: {handshake:?}");
    let token = format!("\0{user}\0{password}");
    let answer = wire.call(2, &SaslAuthenticateRequest::default().with_auth_bytes(token.into_bytes().into()))?;
    Ok((wire, answer.error_code))
}

/// The error of a Metadata request for `topic` (0: described).
fn describe_error(wire: &mut Wire, topic: &str) -> TestResult<i16> {
    let request = MetadataRequest::default().with_topics(Some(vec![
        kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.to_owned())))),
    ]));
    let response = wire.call(9, &request)?;
    Ok(response.topics.first().map_or(-1, |t| t.error_code))
}

fn alice_may_describe(topic: &str) -> AclCreation {
    AclCreation::default()
        .with_resource_type(2) // TOPIC
        .with_resource_name(StrBytes::from_string(topic.to_owned()))
        .with_resource_pattern_type(3) // LITERAL
        .with_principal(StrBytes::from_static_str("User:alice"))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(8) // DESCRIBE
        .with_permission_type(3) // ALLOW
}

/// How many `api` requests `broker` answered (its `kaas_requests_total`).
fn answered(broker: &kaas_broker::Broker, api: &str) -> TestResult<u64> {
    let mut registry = prometheus_client::registry::Registry::default();
    broker.metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    let series = format!("requests_total{{api=\"{api}\"}} ");
    Ok(text.lines().find_map(|l| l.strip_prefix(series.as_str())).map_or(Ok(0), str::parse)?)
}

/// Polls `cond` every 100 ms for up to 15 s.
fn eventually(what: &str, mut cond: impl FnMut() -> TestResult<bool>) -> TestResult {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !cond()? {
        if std::time::Instant::now() > deadline {
            return Err(format!("never: {what}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acls_changed_through_any_broker_are_enforced_by_every_broker() -> TestResult {
    let dir = tempfile::tempdir()?;
    let credentials = dir.path().join("users.json");
    add_user(&credentials, "admin", "admin-secret", "SCRAM-SHA-512")?;
    add_user(&credentials, "alice", "alice-secret", "SCRAM-SHA-512")?;
    let security = ListenerSecurity {
        tls: None,
        sasl: Some(SaslSettings {
            mechanisms: vec![Mechanism::Plain],
            credentials: Some(Arc::new(CredentialStore::open(credentials)?)),
            oauth: None,
            reauth: None,
        }),
        authorizer: Some(AuthzSettings { policy: Policy { super_users: vec!["admin".into()], allow_if_no_acl: false }, max_acls: 100 }),
    };
    // No periodic read within the test: a broker that is neither the controller nor the one
    // a change went through learns of it only by the controller's push.
    let cluster = Cluster::start_tuned(3, security, |s| s.controller_files_refresh = Duration::from_secs(3600)).await?;
    let settled = cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    let controller = settled.controller_id;
    let mut others = cluster.nodes.values().filter(|n| n.id != controller).map(|n| n.bootstrap.clone());
    let (via, elsewhere) = (others.next().ok_or("no second broker")?, others.next().ok_or("no third broker")?);
    let every: Vec<String> = cluster.nodes.values().map(|n| n.bootstrap.clone()).collect();
    assert!(cluster.nodes.get(&controller).is_some_and(|n| n.runtime.is_controller()), "broker {controller} is the controller");
    let data = cluster.data().to_path_buf();
    let controller_broker = cluster.nodes.get(&controller).ok_or("no controller node")?.broker.clone();

    tokio::task::spawn_blocking(move || -> TestResult {
        let mut admin = login(&via, "admin", "admin-secret")?;
        admin.create_topic("guarded", 1)?;
        let mut alices: Vec<Wire> = every.iter().map(|b| login(b, "alice", "alice-secret")).collect::<TestResult<_>>()?;
        for alice in &mut alices {
            assert_eq!(describe_error(alice, "guarded")?, ResponseError::TopicAuthorizationFailed.code(), "no ACL names alice yet");
        }
        // Alice may not change ACLs, on any broker.
        let mut alice_via = login(&via, "alice", "alice-secret")?;
        let refused = alice_via.call(3, &CreateAclsRequest::default().with_creations(vec![alice_may_describe("guarded")]))?;
        assert_eq!(refused.results[0].error_code, ResponseError::ClusterAuthorizationFailed.code(), "{refused:?}");

        // The admin's CreateAcls through a broker that is not the controller is forwarded to it.
        let created = admin.call(3, &CreateAclsRequest::default().with_creations(vec![alice_may_describe("guarded")]))?;
        assert_eq!(created.results[0].error_code, 0, "{created:?}");
        assert_eq!(answered(&controller_broker, "CreateAcls")?, 1, "the controller wrote it");
        let file = std::fs::read_to_string(data.join("__cluster/acls.json"))?;
        assert!(file.contains("User:alice") && file.contains("\"controller_epoch\""), "written by the controller: {file}");
        for (alice, broker) in alices.iter_mut().zip(&every) {
            eventually(&format!("{broker} lets alice describe guarded"), || Ok(describe_error(alice, "guarded")? == 0))?;
        }

        let mut admin_elsewhere = login(&elsewhere, "admin", "admin-secret")?;
        let filter = DeleteAclsFilter::default()
            .with_resource_type_filter(2)
            .with_resource_name_filter(Some(StrBytes::from_static_str("guarded")))
            .with_pattern_type_filter(3)
            .with_principal_filter(Some(StrBytes::from_static_str("User:alice")))
            .with_host_filter(None)
            .with_operation(1) // ANY
            .with_permission_type(1); // ANY
        let deleted = admin_elsewhere.call(2, &DeleteAclsRequest::default().with_filters(vec![filter]))?;
        assert_eq!(deleted.filter_results[0].error_code, 0, "{deleted:?}");
        assert_eq!(deleted.filter_results[0].matching_acls.len(), 1, "{deleted:?}");
        assert_eq!(answered(&controller_broker, "DeleteAcls")?, 1, "the controller deleted it");
        for (alice, broker) in alices.iter_mut().zip(&every) {
            eventually(&format!("{broker} refuses alice again"), || {
                Ok(describe_error(alice, "guarded")? == ResponseError::TopicAuthorizationFailed.code())
            })?;
        }
        Ok(())
    })
    .await??;
    Ok(())
}

/// An AlterClientQuotas entry for client id `client`: `request_percentage` set, or removed.
fn request_percentage(client: &str, value: Option<f64>) -> kafka_protocol::messages::alter_client_quotas_request::EntryData {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    let entity = EntityData::default()
        .with_entity_type(StrBytes::from_static_str("client-id"))
        .with_entity_name(Some(StrBytes::from_string(client.to_owned())));
    let op = OpData::default().with_key(StrBytes::from_static_str("request_percentage"));
    let op = match value {
        Some(v) => op.with_value(v),
        None => op.with_remove(true),
    };
    EntryData::default().with_entity(vec![entity]).with_ops(vec![op])
}

/// The quota values a broker describes for every entity ("key=value").
fn described_quotas(broker: &str) -> TestResult<Vec<String>> {
    let response = Wire::connect_as(broker, "describer")?.call(1, &DescribeClientQuotasRequest::default())?;
    assert_eq!(response.error_code, 0, "{response:?}");
    Ok(response
        .entries
        .unwrap_or_default()
        .iter()
        .flat_map(|e| e.values.iter().map(|v| format!("{}={}", v.key.as_str(), v.value)))
        .collect())
}

/// Whether one of 20 Metadata answers to `client` from `broker` carried a throttle time.
fn throttles(broker: &str, client: &str) -> TestResult<bool> {
    let mut wire = Wire::connect_as(broker, client)?;
    for _ in 0..20 {
        if wire.call(12, &MetadataRequest::default())?.throttle_time_ms > 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_quotas_set_through_any_broker_apply_on_every_broker() -> TestResult {
    // No periodic read within the test: the controller's push carries each change.
    let cluster = Cluster::start_tuned(3, ListenerSecurity::default(), |s| s.controller_files_refresh = Duration::from_secs(3600)).await?;
    let settled = cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    let controller = settled.controller_id;
    let mut others = cluster.nodes.values().filter(|n| n.id != controller).map(|n| n.bootstrap.clone());
    let (via, elsewhere) = (others.next().ok_or("no second broker")?, others.next().ok_or("no third broker")?);
    let every: Vec<String> = cluster.nodes.values().map(|n| n.bootstrap.clone()).collect();
    let data = cluster.data().to_path_buf();
    let controller_broker = cluster.nodes.get(&controller).ok_or("no controller node")?.broker.clone();

    tokio::task::spawn_blocking(move || -> TestResult {
        for broker in &every {
            assert!(!throttles(broker, "metered")?, "{broker} throttled before any quota");
        }
        // 0.0001 % of a thread: ten microseconds of request time over the ten-second window.
        let set = AlterClientQuotasRequest::default().with_entries(vec![request_percentage("metered", Some(0.0001))]);
        let answer = Wire::connect(&via)?.call(1, &set)?;
        assert_eq!(answer.entries[0].error_code, 0, "{answer:?}");
        assert_eq!(answered(&controller_broker, "AlterClientQuotas")?, 1, "the controller wrote it");
        let file = std::fs::read_to_string(data.join("__cluster/quotas.json"))?;
        assert!(file.contains("metered") && file.contains("\"controller_epoch\""), "written by the controller: {file}");
        // The broker that forwarded the change serves it at once; the others when the push
        // reaches them.
        assert_eq!(described_quotas(&via)?, ["request_percentage=0.0001"]);
        for broker in &every {
            eventually(&format!("{broker} describes the quota"), || Ok(described_quotas(broker)? == ["request_percentage=0.0001"]))?;
            assert!(throttles(broker, "metered")?, "{broker} does not throttle the metered client");
            assert!(!throttles(broker, "unmetered")?, "{broker} throttles a client without a quota");
        }

        // validate_only writes nothing; removing through a third broker removes it everywhere.
        let dry = AlterClientQuotasRequest::default().with_entries(vec![request_percentage("dry-run", Some(1.0))]).with_validate_only(true);
        assert_eq!(Wire::connect(&elsewhere)?.call(1, &dry)?.entries[0].error_code, 0);
        let remove = AlterClientQuotasRequest::default().with_entries(vec![request_percentage("metered", None)]);
        let answer = Wire::connect(&elsewhere)?.call(1, &remove)?;
        assert_eq!(answer.entries[0].error_code, 0, "{answer:?}");
        assert_eq!(answered(&controller_broker, "AlterClientQuotas")?, 3, "the controller answered all three");
        for broker in &every {
            eventually(&format!("{broker} drops the quota"), || Ok(described_quotas(broker)?.is_empty()))?;
        }
        Ok(())
    })
    .await??;
    Ok(())
}

/// A KafkaUser entry as the volume agent writes it: a password's SCRAM credential, ACL rules,
/// quotas.
fn kafka_user(uid: &str, password: &str, acls: Vec<AclRule>, quotas: UserQuotas) -> KafkaUserEntry {
    let mut entry = KafkaUserEntry { uid: uid.into(), acls, quotas, ..KafkaUserEntry::default() };
    entry.scram.insert(ScramHash::Sha512, kafka_users::scram_credential(None, ScramHash::Sha512, password.as_bytes()));
    entry
}

fn rule(kind: AclResourceType, name: Option<&str>, operations: Vec<AclOperation>) -> AclRule {
    AclRule {
        resource: AclResource { kind, name: name.map(str::to_string), pattern_type: AclPatternType::Literal },
        operations,
        host: "*".into(),
        permission: AclPermission::Allow,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_users_on_the_volume_log_in_are_authorized_and_metered_on_every_broker() -> TestResult {
    // No credentials file and no super user: every user is a KafkaUser.
    let security = ListenerSecurity {
        tls: None,
        sasl: Some(SaslSettings {
            mechanisms: vec![Mechanism::Plain],
            credentials: Some(Arc::new(CredentialStore::managed_only())),
            oauth: None,
            reauth: None,
        }),
        authorizer: Some(AuthzSettings { policy: Policy { super_users: vec![], allow_if_no_acl: false }, max_acls: 100 }),
    };
    let cluster = Cluster::start_secured(3, security).await?;
    cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    let every: Vec<String> = cluster.nodes.values().map(|n| n.bootstrap.clone()).collect();
    let brokers: Vec<Arc<kaas_broker::Broker>> = cluster.nodes.values().map(|n| n.broker.clone()).collect();
    let fs = kaas_shared::fs::RealFs;
    let layout = kaas_shared::layout::Layout::new(cluster.data());

    tokio::task::spawn_blocking(move || -> TestResult {
        for broker in &every {
            assert_eq!(try_login(broker, "alice", "alice-secret")?.1, ResponseError::SaslAuthenticationFailed.code(), "no users yet");
        }
        // What the volume agent writes for two KafkaUsers: alice may create and use `guarded`
        // and change quotas, with a produce quota of her own; bob may do nothing.
        let mut file = KafkaUsersFile::default();
        let alice_acls = vec![
            rule(AclResourceType::Topic, Some("guarded"), vec![AclOperation::All]),
            rule(AclResourceType::Cluster, None, vec![AclOperation::AlterConfigs]),
        ];
        let alice_quotas = UserQuotas { producer_byte_rate: Some(1_048_576), ..UserQuotas::default() };
        file.set("alice", kafka_user("uid-alice", "alice-secret", alice_acls, alice_quotas));
        file.set("bob", kafka_user("uid-bob", "bob-secret", vec![], UserQuotas::default()));
        kafka_users::write(&fs, &layout, &file)?;

        for broker in &every {
            eventually(&format!("{broker} knows alice"), || Ok(try_login(broker, "alice", "alice-secret")?.1 == 0))?;
            assert_eq!(try_login(broker, "alice", "wrong")?.1, ResponseError::SaslAuthenticationFailed.code());
        }
        let mut alice = login(&every[0], "alice", "alice-secret")?;
        alice.create_topic("guarded", 1)?;
        for broker in &every {
            let mut alice_here = login(broker, "alice", "alice-secret")?;
            // Until the controller assigns the new topic a leader it is LEADER_NOT_AVAILABLE.
            eventually(&format!("alice describes guarded on {broker}"), || Ok(describe_error(&mut alice_here, "guarded")? == 0))?;
            let mut bob = login(broker, "bob", "bob-secret")?;
            assert_eq!(describe_error(&mut bob, "guarded")?, ResponseError::TopicAuthorizationFailed.code(), "bob on {broker}");
        }
        for broker in &brokers {
            let bound = broker.quotas.max_in_window(QuotaKey::ProducerByteRate, "alice", "any-client");
            assert!(bound.is_some(), "broker {} meters alice's produce", broker.config.node_id);
            assert!(broker.quotas.max_in_window(QuotaKey::ProducerByteRate, "bob", "any-client").is_none());
        }
        // Alice's own quotas are her KafkaUser's: refused through the Kafka API (POLICY_VIOLATION),
        // while a client id's are hers to set.
        let user_quota = {
            use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
            let entity = EntityData::default()
                .with_entity_type(StrBytes::from_static_str("user"))
                .with_entity_name(Some(StrBytes::from_static_str("alice")));
            EntryData::default()
                .with_entity(vec![entity])
                .with_ops(vec![OpData::default().with_key(StrBytes::from_static_str("producer_byte_rate")).with_value(1.0)])
        };
        let answer = alice
            .call(1, &AlterClientQuotasRequest::default().with_entries(vec![user_quota, request_percentage("batch-job", Some(50.0))]))?;
        assert_eq!(answer.entries[0].error_code, ResponseError::PolicyViolation.code(), "{answer:?}");
        assert_eq!(answer.entries[1].error_code, 0, "{answer:?}");

        // Deleting alice's KafkaUser takes her credentials and ACLs away on every broker.
        file.remove_dead(&["uid-bob".to_string()].into(), file.revision);
        kafka_users::write(&fs, &layout, &file)?;
        for broker in &every {
            eventually(&format!("{broker} forgets alice"), || {
                Ok(try_login(broker, "alice", "alice-secret")?.1 == ResponseError::SaslAuthenticationFailed.code())
            })?;
        }
        // Her ACLs are gone too. NB: the three in-process brokers share one credential store, so
        // her refused logins may come from another broker's read of the file; this broker's
        // authorizer follows at its own read (a broker serves credentials last, so on its own
        // it refuses her login only once her ACLs are gone).
        eventually("her ACLs gone on the broker of her open session", || {
            Ok(describe_error(&mut alice, "guarded")? == ResponseError::TopicAuthorizationFailed.code())
        })?;
        Ok(())
    })
    .await??;
    Ok(())
}
