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
