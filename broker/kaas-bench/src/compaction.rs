//! The log cleaner's effect on producers: keyed 1 KiB records to a delete-policy topic and to
//! a compacted one, each flat out and then at a fixed rate. On the compacted topic the fixed-rate
//! phase runs while the cleaner works through what the flat-out phase wrote (small segments
//! close quickly and become cleanable), so its p99 beside the delete-policy topic's is the
//! cleaner's cost to producers. With `--metrics` (kaas's /metrics), what the cleaner did over
//! the compacted phases is printed too; against another broker the produce figures stand alone.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::produce::{self, ProduceArgs};
use crate::report;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CompactionArgs {
    /// Keys the records cycle over.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Seconds of each phase.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Messages per second of the fixed-rate phases.
    #[arg(long, default_value_t = 5_000)]
    rate: u64,
    /// segment.bytes of both topics: small, so that segments close (and become cleanable)
    /// while the run lasts.
    #[arg(long, default_value_t = 8 << 20)]
    segment_bytes: u64,
    /// kaas's metrics URL (`http://host:port/metrics`): the cleaner's passes and bytes.
    #[arg(long)]
    metrics: Option<String>,
    /// A topic config for both topics, `key=value` (repeatable), e.g. `flush.messages=1` to make
    /// Apache Kafka fsync every append as kaas does.
    #[arg(long = "topic-config")]
    topic_configs: Vec<String>,
    /// Prefix of the topics it creates.
    #[arg(long, default_value = "bench-compaction")]
    topic_prefix: String,
}

const PACED: &str = "fixed-rate";

pub(crate) fn run(bootstrap: &str, args: &CompactionArgs) -> anyhow::Result<()> {
    let run = std::process::id();
    let segment_bytes = args.segment_bytes.to_string();
    let mut configs = vec![("segment.bytes", segment_bytes.as_str())];
    for kv in &args.topic_configs {
        let (k, v) = kv.split_once('=').with_context(|| format!("--topic-config {kv}: not key=value"))?;
        configs.push((k, v));
    }
    let plain = format!("{}-delete-{run}", args.topic_prefix);
    let compacted = format!("{}-compact-{run}", args.topic_prefix);
    crate::create_topic_with(bootstrap, &plain, 1, &configs)?;
    crate::create_topic_with(bootstrap, &compacted, 1, &[configs.as_slice(), &[("cleanup.policy", "compact")]].concat())?;
    println!(
        "\nkeyed {} B records over {} keys, acks=all, 1 partition, {}; flat out, then {} msg/s, {} s each",
        args.size,
        args.keys,
        configs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "),
        args.rate,
        args.seconds
    );
    let mut rows = Vec::new();
    let mut compacted_phases = Vec::new();
    let before = args.metrics.as_deref().map(|url| cleaner_figures(url, &compacted)).transpose()?;
    for (topic, policy) in [(&plain, "delete"), (&compacted, "compact")] {
        let flat = ProduceArgs {
            topic: topic.clone(),
            partitions: 1,
            size: args.size,
            seconds: args.seconds,
            rate: None,
            acks: "all".into(),
            linger_ms: None,
            keys: Some(args.keys),
            settings: Vec::new(),
            stats: false,
        };
        eprintln!("producing flat out to {topic} for {} s", args.seconds);
        let flat_start = SystemTime::now();
        rows.push(produce::run(bootstrap, &flat)?.row(&format!("{policy}, flat out")));
        let paced = ProduceArgs { rate: Some(args.rate), ..flat };
        eprintln!("producing {} msg/s to {topic} for {} s", args.rate, args.seconds);
        let paced_start = SystemTime::now();
        rows.push(produce::run(bootstrap, &paced)?.row(&format!("{policy}, {} msg/s", args.rate)));
        if policy == "compact" {
            compacted_phases = vec![("flat out", flat_start), (PACED, paced_start)];
        }
    }
    report::print_table(&rows);
    if let (Some(url), Some(before)) = (args.metrics.as_deref(), before) {
        let after = cleaner_figures(url, &compacted)?;
        println!(
            "cleaner on {compacted} over the compacted phases: {} passes, {:.1} MB cleaned, {:.1} MB removed, dirty ratio {:.2} at the end",
            after.passes - before.passes,
            (after.cleaned_bytes - before.cleaned_bytes) / 1e6,
            (after.removed_bytes - before.removed_bytes) / 1e6,
            after.dirty_ratio,
        );
        // Which phase the last pass finished in, so the reader knows whether it overlapped the
        // fixed-rate phase.
        if after.passes > before.passes {
            let ended = UNIX_EPOCH + Duration::from_secs_f64(after.last_clean_s);
            if let Some((name, start)) = compacted_phases.iter().rev().find(|(_, start)| *start <= ended) {
                let into = ended.duration_since(*start).unwrap_or_default().as_secs_f64();
                println!("its last pass ended {into:.1} s into the compact {name} phase");
            }
        }
    }
    Ok(())
}

/// The cleaner's gauges for partition 0 of `topic` (zero before its first pass).
#[derive(Debug, Default, Clone, Copy)]
struct CleanerFigures {
    passes: f64,
    cleaned_bytes: f64,
    removed_bytes: f64,
    dirty_ratio: f64,
    /// When the last pass ended (Unix seconds).
    last_clean_s: f64,
}

fn cleaner_figures(url: &str, topic: &str) -> anyhow::Result<CleanerFigures> {
    let text = http_get(url)?;
    let value = |name: &str| {
        let prefix = format!("{name}{{topic=\"{topic}\",partition=\"0\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    Ok(CleanerFigures {
        passes: value("kaas_partition_cleaner_passes"),
        cleaned_bytes: value("kaas_partition_cleaner_cleaned_bytes"),
        removed_bytes: value("kaas_partition_cleaner_removed_bytes"),
        dirty_ratio: value("kaas_partition_cleaner_dirty_ratio"),
        last_clean_s: value("kaas_partition_cleaner_last_clean_timestamp_seconds"),
    })
}

/// A plain HTTP/1.0 GET of `http://host:port/path`: the body.
fn http_get(url: &str) -> anyhow::Result<String> {
    let rest = url.strip_prefix("http://").with_context(|| format!("{url}: only http:// URLs"))?;
    let (host, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut stream = TcpStream::connect(host).with_context(|| format!("connecting to {host}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response).with_context(|| format!("reading {url}"))?;
    let (head, body) = response.split_once("\r\n\r\n").with_context(|| format!("{url}: no HTTP response"))?;
    anyhow::ensure!(head.starts_with("HTTP/1.") && head.split_whitespace().nth(1) == Some("200"), "{url}: {}", head.lines().next().unwrap_or(""));
    Ok(body.to_string())
}
