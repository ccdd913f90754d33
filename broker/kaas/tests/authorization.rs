//! Authorization with real clients: a broker with `--authorizer standard` behind SASL/SCRAM
//! refuses a user without ACLs with Kafka's errors (librdkafka through confluent-kafka), lets it
//! through once Kafka's own `kafka-acls` (AclCommand of Apache Kafka 4.4.0) grants it, lets a
//! DENY win and a super user bypass; SCRAM credentials made with `kafka-configs` log in.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Kaas, TestResult};

/// A user the test logs in as.
#[derive(Clone, Copy)]
struct User {
    name: &'static str,
    password: &'static str,
}

const ADMIN: User = User { name: "admin", password: "admin-secret" };
const ALICE: User = User { name: "alice", password: "alice-secret" };
const BOB: User = User { name: "bob", password: "bob-secret" };

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// Writes a SCRAM-SHA-512 credential with the broker's CLI (the password in the environment).
fn add_user(credentials: &Path, user: User) -> TestResult {
    let out = Command::new(env!("CARGO_BIN_EXE_kaas"))
        .args(["scram-credential", "--credentials", path(credentials), "--user", user.name])
        .env("KAAS_SCRAM_PASSWORD", user.password)
        .output()?;
    assert!(out.status.success(), "scram-credential: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// A SASL_PLAINTEXT broker with SCRAM-SHA-512 and ACL authorization; `admin` is a super user.
fn start(credentials: &Path) -> TestResult<Kaas> {
    Kaas::start_with(&[
        "--security-protocol",
        "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms",
        "SCRAM-SHA-512",
        "--sasl-credentials",
        path(credentials),
        "--authorizer",
        "standard",
        "--super-users",
        "User:admin",
    ])
}

/// A broker that knows the users admin (a super user) and alice, with the admin's properties for
/// Kafka's tools; the directory holds the credentials and the properties.
fn start_with_admin_and_alice() -> TestResult<(tempfile::TempDir, Kaas, PathBuf)> {
    let dir = tempfile::tempdir()?;
    let credentials = dir.path().join("users.json");
    add_user(&credentials, ADMIN)?;
    add_user(&credentials, ALICE)?;
    let kaas = start(&credentials)?;
    let admin = tool_properties(dir.path(), ADMIN)?;
    Ok((dir, kaas, admin))
}

/// One operation as `user` through confluent-kafka; what it printed ("ok ..." or an error name).
fn run(kaas: &Kaas, user: User, action: &[&str]) -> TestResult<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/acl_client.py");
    let out = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg(script)
        .args([kaas.bootstrap.as_str(), user.name, user.password])
        .args(action)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answer = stdout.lines().last().unwrap_or_default().trim().to_string();
    if answer.is_empty() {
        return Err(format!("{action:?} as {} printed nothing: {}", user.name, String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(answer)
}

fn expect(kaas: &Kaas, user: User, action: &[&str], wanted: &str) -> TestResult {
    let got = run(kaas, user, action)?;
    assert!(got.starts_with(wanted), "{action:?} as {}: wanted {wanted}, got {got}", user.name);
    Ok(())
}

/// A user's client properties for Kafka's tools.
fn tool_properties(dir: &Path, user: User) -> TestResult<PathBuf> {
    let file = dir.join(format!("{}.properties", user.name));
    let jaas = format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{}\" password=\"{}\";",
        user.name, user.password
    );
    std::fs::write(&file, format!("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={jaas}\n"))?;
    Ok(file)
}

/// Runs one of Apache Kafka 4.4.0's tools (fetched by the conformance suite's script) with a
/// user's properties; what it printed, and whether it succeeded.
fn try_kafka_tool(kaas: &Kaas, properties: &Path, class: &str, args: &[&str]) -> TestResult<(bool, String)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../e2e/conformance/bin/kafka-class.sh");
    let out = Command::new(script)
        .arg(class)
        .args(["--bootstrap-server", kaas.bootstrap.as_str(), "--command-config", path(properties)])
        .args(args)
        .output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}

fn kafka_tool(kaas: &Kaas, properties: &Path, class: &str, args: &[&str]) -> TestResult<String> {
    let (ok, text) = try_kafka_tool(kaas, properties, class, args)?;
    assert!(ok, "{class} {args:?} failed:\n{text}");
    Ok(text)
}

fn kafka_acls(kaas: &Kaas, properties: &Path, args: &[&str]) -> TestResult<String> {
    kafka_tool(kaas, properties, "org.apache.kafka.tools.AclCommand", args)
}

#[test]
fn acls_decide_what_each_user_may_do() -> TestResult {
    let (dir, mut kaas, admin) = start_with_admin_and_alice()?;

    // The super user needs no ACL.
    for topic in ["orders", "logs-app", "secret"] {
        expect(&kaas, ADMIN, &["create", topic], "ok")?;
        expect(&kaas, ADMIN, &["produce", topic], "ok")?;
    }

    // Without ACLs alice sees no topic and may do nothing, each refusal with Kafka's error.
    assert_eq!(run(&kaas, ALICE, &["topics"])?, "ok topics");
    expect(&kaas, ALICE, &["produce", "orders"], "TOPIC_AUTHORIZATION_FAILED")?;
    expect(&kaas, ALICE, &["consume", "orders", "app-1"], "GROUP_AUTHORIZATION_FAILED")?;
    expect(&kaas, ALICE, &["create", "new-topic"], "TOPIC_AUTHORIZATION_FAILED")?;
    expect(&kaas, ALICE, &["delete", "orders"], "TOPIC_AUTHORIZATION_FAILED")?;
    expect(&kaas, ALICE, &["describe-configs", "orders"], "TOPIC_AUTHORIZATION_FAILED")?;
    expect(&kaas, ALICE, &["txn-produce", "orders", "tx-1"], "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")?;

    // READ on a topic lets alice see it and read it, not write it; an idempotent producer
    // needs WRITE on some topic (or IDEMPOTENT_WRITE on the cluster) for its producer id.
    kafka_acls(&kaas, &admin, &["--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders"])?;
    assert_eq!(run(&kaas, ALICE, &["topics"])?, "ok topics orders");
    expect(&kaas, ALICE, &["idempotent-produce", "orders"], "CLUSTER_AUTHORIZATION_FAILED")?;
    expect(&kaas, ALICE, &["produce", "orders"], "TOPIC_AUTHORIZATION_FAILED")?;
    // Consuming needs READ on the group too: a PREFIXED group ACL covers app-1.
    expect(&kaas, ALICE, &["consume", "orders", "app-1"], "GROUP_AUTHORIZATION_FAILED")?;
    kafka_acls(
        &kaas,
        &admin,
        &["--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "app-", "--resource-pattern-type", "prefixed"],
    )?;
    expect(&kaas, ALICE, &["consume", "orders", "app-1"], "ok")?;
    expect(&kaas, ALICE, &["consume", "orders", "other"], "GROUP_AUTHORIZATION_FAILED")?;

    // WRITE on the topic: alice produces there, idempotently too (Kafka 2.8+).
    kafka_acls(&kaas, &admin, &["--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders"])?;
    expect(&kaas, ALICE, &["produce", "orders"], "ok")?;
    expect(&kaas, ALICE, &["idempotent-produce", "orders"], "ok")?;

    // authorized_operations (Metadata, DescribeGroups, DescribeCluster) say the same.
    assert_eq!(run(&kaas, ALICE, &["topic-ops", "orders"])?, "ok ops DESCRIBE,READ,WRITE");
    assert_eq!(run(&kaas, ALICE, &["group-ops", "app-1"])?, "ok ops DESCRIBE,READ");
    assert_eq!(run(&kaas, ALICE, &["cluster-ops"])?, "ok ops");
    let all = "ok ops ALTER,ALTER_CONFIGS,CLUSTER_ACTION,CREATE,DESCRIBE,DESCRIBE_CONFIGS,IDEMPOTENT_WRITE";
    assert_eq!(run(&kaas, ADMIN, &["cluster-ops"])?, all);
    // Groups have configs since Kafka 4 (KIP-848): their operations include the config ones.
    assert_eq!(run(&kaas, ADMIN, &["group-ops", "app-1"])?, "ok ops ALTER_CONFIGS,DELETE,DESCRIBE,DESCRIBE_CONFIGS,READ");

    // A PREFIXED topic ACL for everything under logs-: create, produce, configs, delete.
    kafka_acls(
        &kaas,
        &admin,
        &["--add", "--allow-principal", "User:alice", "--operation", "All", "--topic", "logs-", "--resource-pattern-type", "prefixed"],
    )?;
    expect(&kaas, ALICE, &["produce", "logs-app"], "ok")?;
    expect(&kaas, ALICE, &["describe-configs", "logs-app"], "ok")?;
    expect(&kaas, ALICE, &["create", "logs-new"], "ok")?;
    expect(&kaas, ALICE, &["delete", "logs-new"], "ok")?;
    expect(&kaas, ALICE, &["produce", "secret"], "TOPIC_AUTHORIZATION_FAILED")?;
    assert_eq!(run(&kaas, ALICE, &["topics"])?, "ok topics logs-app,orders");

    // Transactions need WRITE on the transactional id.
    kafka_acls(
        &kaas,
        &admin,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--transactional-id",
            "tx-",
            "--resource-pattern-type",
            "prefixed",
        ],
    )?;
    expect(&kaas, ALICE, &["txn-produce", "logs-app", "tx-1"], "ok")?;

    // DENY wins over ALLOW; the super user is not affected.
    kafka_acls(&kaas, &admin, &["--add", "--deny-principal", "User:alice", "--operation", "Write", "--topic", "orders"])?;
    expect(&kaas, ALICE, &["produce", "orders"], "TOPIC_AUTHORIZATION_FAILED")?;
    expect(&kaas, ADMIN, &["produce", "orders"], "ok")?;
    let listed = kafka_acls(&kaas, &admin, &["--list", "--topic", "orders"])?;
    assert!(listed.contains("principal=User:alice, host=*, operation=WRITE, permissionType=DENY"), "{listed}");

    // ACLs are durable: after a restart the DENY still holds; removing it lets alice write.
    kaas.stop()?;
    kaas.restart()?;
    expect(&kaas, ALICE, &["produce", "orders"], "TOPIC_AUTHORIZATION_FAILED")?;
    kafka_acls(&kaas, &admin, &["--remove", "--force", "--deny-principal", "User:alice", "--operation", "Write", "--topic", "orders"])?;
    expect(&kaas, ALICE, &["produce", "orders"], "ok")?;

    // Only who may DESCRIBE the cluster lists ACLs.
    let (listed, text) = try_kafka_tool(&kaas, &tool_properties(dir.path(), ALICE)?, "org.apache.kafka.tools.AclCommand", &["--list"])?;
    assert!(!listed && text.contains("ClusterAuthorizationException"), "{text}");
    Ok(())
}

#[test]
fn scram_credentials_made_through_the_admin_api_log_in() -> TestResult {
    let (dir, kaas, admin) = start_with_admin_and_alice()?;

    expect(&kaas, BOB, &["topics"], "_AUTHENTICATION")?;

    // kafka-configs salts the password on the client; the broker stores the salted credential.
    kafka_tool(
        &kaas,
        &admin,
        "org.apache.kafka.tools.ConfigCommand",
        &[
            "--alter",
            "--add-config",
            &format!("SCRAM-SHA-512=[password={}]", BOB.password),
            "--entity-type",
            "users",
            "--entity-name",
            BOB.name,
        ],
    )?;
    expect(&kaas, BOB, &["topics"], "ok")?;
    expect(&kaas, ADMIN, &["scram-describe", "bob"], "ok scram SCRAM_SHA_512:4096")?;
    let stored = std::fs::read_to_string(dir.path().join("users.json"))?;
    assert!(stored.contains("\"bob\"") && !stored.contains(BOB.password), "{stored}");

    // The same through confluent-kafka's admin API; a user without ALTER on the cluster cannot.
    expect(&kaas, ADMIN, &["scram-alter", "carol", "carol-secret"], "ok")?;
    expect(&kaas, User { name: "carol", password: "carol-secret" }, &["topics"], "ok")?;
    expect(&kaas, ALICE, &["scram-alter", "alice", "stolen"], "CLUSTER_AUTHORIZATION_FAILED")?;
    expect(&kaas, ALICE, &["topics"], "ok")?;
    Ok(())
}

fn kafka_configs(kaas: &Kaas, properties: &Path, args: &[&str]) -> TestResult<String> {
    kafka_tool(kaas, properties, "org.apache.kafka.tools.ConfigCommand", args)
}

/// The throttle librdkafka reported and the seconds a quota action took ("ok throttled MS in S s").
fn throttled(answer: &str) -> TestResult<(u64, f64)> {
    let fields: Vec<&str> = answer.split_whitespace().collect();
    match fields.as_slice() {
        ["ok", "throttled", ms, "in", secs, "s"] => Ok((ms.parse()?, secs.parse()?)),
        _ => Err(format!("unexpected answer {answer:?}").into()),
    }
}

/// Client quotas set with Kafka's `kafka-configs` (AlterClientQuotas) throttle a user over its
/// produce and fetch byte rates — librdkafka reports the broker's throttle time and takes
/// longer than the free part of the quota allows — and nobody else; they are durable, only who
/// may ALTER_CONFIGS the cluster sets them, and an invalid value is refused.
#[test]
fn client_quotas_throttle_a_user_over_its_byte_rates() -> TestResult {
    let (dir, mut kaas, admin) = start_with_admin_and_alice()?;
    let alice = tool_properties(dir.path(), ALICE)?;
    expect(&kaas, ADMIN, &["create", "metered"], "ok")?;
    kafka_acls(&kaas, &admin, &["--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write", "--topic", "metered"])?;
    kafka_acls(&kaas, &admin, &["--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "quota-reader"])?;

    let alice_rates = ["--alter", "--add-config", "producer_byte_rate=262144,consumer_byte_rate=131072", "--entity-type", "users", "--entity-name", "alice"];
    let (ok, text) = try_kafka_tool(&kaas, &alice, "org.apache.kafka.tools.ConfigCommand", &alice_rates)?;
    assert!(!ok && text.contains("ClusterAuthorizationException"), "alice set her own quota:\n{text}");
    let fractional_bytes = ["--alter", "--add-config", "producer_byte_rate=1000.5", "--entity-type", "users", "--entity-name", "alice"];
    let (ok, text) = try_kafka_tool(&kaas, &admin, "org.apache.kafka.tools.ConfigCommand", &fractional_bytes)?;
    assert!(!ok && text.contains("producer_byte_rate must be a positive number"), "{text}");

    kafka_configs(&kaas, &admin, &alice_rates)?;
    kafka_configs(&kaas, &admin, &["--alter", "--add-config", "consumer_byte_rate=1048576", "--entity-type", "clients", "--entity-default"])?;
    // An address's connection rate (KIP-612), for one the test does not connect from.
    kafka_configs(&kaas, &admin, &["--alter", "--add-config", "connection_creation_rate=5", "--entity-type", "ips", "--entity-name", "10.9.8.7"])?;
    // Acknowledged means fsynced: a restarted broker still has both.
    kaas.stop()?;
    kaas.restart()?;
    let described = kafka_configs(&kaas, &admin, &["--describe", "--entity-type", "users", "--entity-name", "alice"])?;
    assert!(described.contains("producer_byte_rate=262144") && described.contains("consumer_byte_rate=131072"), "{described}");
    let defaults = kafka_configs(&kaas, &admin, &["--describe", "--entity-type", "clients", "--entity-default"])?;
    assert!(defaults.contains("consumer_byte_rate=1048576"), "{defaults}");
    let address = kafka_configs(&kaas, &admin, &["--describe", "--entity-type", "ips", "--entity-name", "10.9.8.7"])?;
    assert!(address.contains("connection_creation_rate=5"), "{address}");

    // The admin has no producer quota of its own and none that applies by default.
    let (throttle_ms, _) = throttled(&run(&kaas, ADMIN, &["quota-produce", "metered", "4194304"])?)?;
    assert_eq!(throttle_ms, 0, "the admin was throttled");
    // 4 MiB at 256 KiB/s: the first ten seconds' worth passes at once (a rate is measured over
    // ten windows at least), the rest only as fast as the quota allows.
    let (throttle_ms, secs) = throttled(&run(&kaas, ALICE, &["quota-produce", "metered", "4194304"])?)?;
    assert!(throttle_ms > 0 && secs >= 3.0, "alice's producer: throttled {throttle_ms} ms, {secs} s");
    // 4 MiB at 128 KiB/s, in fetches of at most 1 MiB (librdkafka's max.partition.fetch.bytes):
    // the second takes alice past 1.25 MiB, and she waits before the third.
    let (throttle_ms, secs) = throttled(&run(&kaas, ALICE, &["quota-consume", "metered", "4194304"])?)?;
    assert!(throttle_ms > 0 && secs >= 3.0, "alice's consumer: throttled {throttle_ms} ms, {secs} s");
    // The broker counts the throttled answers and the throttle time it told the clients.
    let metrics = kaas.metrics()?;
    for api in ["Produce", "Fetch"] {
        let value = |name: &str| {
            let prefix = format!("{name}{{api=\"{api}\"}} ");
            metrics.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
        };
        assert!(value("kaas_throttled_responses_total") >= 1.0, "no throttled {api} answer counted:\n{metrics}");
        assert!(value("kaas_throttle_time_seconds_total") > 0.0, "no {api} throttle time counted");
    }

    kafka_configs(&kaas, &admin, &["--alter", "--delete-config", "producer_byte_rate,consumer_byte_rate", "--entity-type", "users", "--entity-name", "alice"])?;
    let described = kafka_configs(&kaas, &admin, &["--describe", "--entity-type", "users", "--entity-name", "alice"])?;
    assert!(!described.contains("byte_rate"), "{described}");
    Ok(())
}
