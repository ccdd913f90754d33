//! A cluster whose client listeners speak SASL_SSL: a real client (confluent-kafka, i.e.
//! librdkafka) authenticates with SCRAM over TLS and runs transactions across every broker,
//! while the brokers send each other markers and verifications on their inter-broker
//! listeners, which the client listener's TLS and SASL do not stand in the way of.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::TestResult;
use common::cluster::Cluster;
use common::pki::{Pki, add_user, path};
use kaas_broker::config::ListenerSecurity;
use kaas_broker::sasl::credentials::CredentialStore;
use kaas_broker::sasl::scram::ScramHash;
use kaas_broker::sasl::{Mechanism, SaslSettings};
use kaas_broker::tls::{ClientAuth, TlsReloader, TlsSettings};

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
