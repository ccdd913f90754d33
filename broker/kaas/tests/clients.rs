//! Other stock clients against kaas with their default settings: kcat (Debian's librdkafka)
//! and kafka-python. `make test` installs both.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{Kaas, TestResult};

#[test]
fn kcat_produces_and_consumes() -> TestResult {
    let kaas = Kaas::start()?;
    let lines: Vec<String> = (0..100).map(|i| format!("key{i}:value{i}")).collect();
    let mut producer = Command::new("kcat")
        .args(["-b", &kaas.bootstrap, "-t", "kcat", "-P", "-K", ":"])
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("kcat is not installed (make deps installs it): {e}"))?;
    producer.stdin.take().ok_or("no stdin")?.write_all((lines.join("\n") + "\n").as_bytes())?;
    let status = producer.wait()?;
    assert!(status.success(), "kcat -P failed: {status}");

    let output = Command::new("kcat")
        .args(["-b", &kaas.bootstrap, "-t", "kcat", "-C", "-e", "-o", "beginning", "-f", "%k:%s\n"])
        .output()?;
    assert!(output.status.success(), "kcat -C failed: {}", String::from_utf8_lossy(&output.stderr));
    let got: Vec<String> = String::from_utf8(output.stdout)?.lines().map(str::to_string).collect();
    assert_eq!(got, lines);

    let metadata = Command::new("kcat").args(["-b", &kaas.bootstrap, "-L", "-t", "kcat"]).output()?;
    let text = String::from_utf8(metadata.stdout)?;
    assert!(text.contains("topic \"kcat\" with 1 partitions"), "{text}");
    Ok(())
}

#[test]
fn kafka_python_round_trip() -> TestResult {
    let kaas = Kaas::start()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/kafka_python_roundtrip.py");
    let output = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .args([script, &kaas.bootstrap, "py-topic"])
        .output()?;
    assert!(
        output.status.success(),
        "kafka-python failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("kafka-python ok 200"));
    Ok(())
}

/// A second, external listener announces its own address: a client that can reach only it
/// (the client listener advertises an address nobody reaches) produces and consumes in a group
/// through it, and each listener's Metadata and FindCoordinator name their own addresses.
#[test]
fn the_external_listener_announces_its_own_address() -> TestResult {
    use common::wire::Wire;
    use kafka_protocol::messages::{FindCoordinatorRequest, MetadataRequest};

    // NB: a port picked by binding and letting go; the broker fails to start (loudly) if
    // something else took it meanwhile.
    let external_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let external = format!("localhost:{external_port}");
    let kaas = Kaas::start_with(&[
        // TEST-NET-1: reachable by no client of this test.
        "--advertise",
        "192.0.2.1:9",
        "--external-listen",
        &format!("127.0.0.1:{external_port}"),
        "--external-advertise",
        &external,
    ])?;

    // (host, port) of each broker in Metadata, and of the group's coordinator.
    type Announced = (Vec<(String, i32)>, (String, i32));
    let announced = |address: &str| -> TestResult<Announced> {
        let mut wire = Wire::connect(address)?;
        let metadata = wire.call(12, &MetadataRequest::default())?;
        let brokers = metadata.brokers.iter().map(|b| (b.host.to_string(), b.port)).collect();
        let coordinator = wire.call(3, &FindCoordinatorRequest::default().with_key("g".into()).with_key_type(0))?;
        Ok((brokers, (coordinator.host.to_string(), coordinator.port)))
    };
    let expected = ("localhost".to_string(), i32::from(external_port));
    assert_eq!(announced(&format!("127.0.0.1:{external_port}"))?, (vec![expected.clone()], expected));
    let unreachable = ("192.0.2.1".to_string(), 9);
    assert_eq!(announced(&kaas.bootstrap)?, (vec![unreachable.clone()], unreachable));

    let lines: Vec<String> = (0..50).map(|i| format!("k{i}:v{i}")).collect();
    let mut producer = Command::new("kcat")
        .args(["-b", &external, "-t", "outside", "-P", "-K", ":", "-X", "topic.message.timeout.ms=20000"])
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("kcat is not installed (make deps installs it): {e}"))?;
    producer.stdin.take().ok_or("no stdin")?.write_all((lines.join("\n") + "\n").as_bytes())?;
    assert!(producer.wait()?.success(), "kcat -P through the external listener failed");
    // A group consumer: it finds its coordinator through the external listener too.
    let output = Command::new("kcat")
        .args(["-b", &external, "-G", "outside-group", "outside", "-e", "-f", "%k:%s\n", "-X", "auto.offset.reset=earliest"])
        .output()?;
    assert!(output.status.success(), "kcat -G failed: {}", String::from_utf8_lossy(&output.stderr));
    let got: Vec<String> = String::from_utf8(output.stdout)?.lines().map(str::to_string).collect();
    assert_eq!(got, lines);
    Ok(())
}

#[test]
fn an_external_listener_needs_its_address() -> TestResult {
    let output = Command::new(env!("CARGO_BIN_EXE_kaas")).args(["--in-memory", "--external-listen", "127.0.0.1:0"]).output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--external-advertise"), "{stderr}");
    Ok(())
}
