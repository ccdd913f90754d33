//! The log cleaner's effect on producers: keyed 1 KiB records to a delete-policy topic and to
//! a compacted one, each flat out and then at a fixed rate. On the compacted topic the fixed-rate
//! phase runs while the cleaner works through what the flat-out phase wrote (small segments
//! close quickly and become cleanable), so its p99 beside the delete-policy topic's is the
//! cleaner's cost to producers. With `--metrics` (kaas's /metrics), what the cleaner did over
//! the compacted phases is printed too; against another broker the produce figures stand alone.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

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
    /// Prefix of the topics it creates.
    #[arg(long, default_value = "bench-compaction")]
    topic_prefix: String,
}

pub(crate) fn run(bootstrap: &str, args: &CompactionArgs) -> anyhow::Result<()> {
    let run = std::process::id();
    let segment_bytes = args.segment_bytes.to_string();
    let plain = format!("{}-delete-{run}", args.topic_prefix);
    let compacted = format!("{}-compact-{run}", args.topic_prefix);
    crate::create_topic_with(bootstrap, &plain, 1, &[("segment.bytes", &segment_bytes)])?;
    crate::create_topic_with(bootstrap, &compacted, 1, &[("cleanup.policy", "compact"), ("segment.bytes", &segment_bytes)])?;
    println!(
        "\nkeyed {} B records over {} keys, acks=all, 1 partition, segment.bytes {}; flat out, then {} msg/s, {} s each",
        args.size, args.keys, args.segment_bytes, args.rate, args.seconds
    );
    let mut rows = Vec::new();
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
        };
        eprintln!("producing flat out to {topic} for {} s", args.seconds);
        rows.push(produce::run(bootstrap, &flat)?.row(&format!("{policy}, flat out")));
        let paced = ProduceArgs { rate: Some(args.rate), ..flat };
        eprintln!("producing {} msg/s to {topic} for {} s", args.rate, args.seconds);
        rows.push(produce::run(bootstrap, &paced)?.row(&format!("{policy}, {} msg/s", args.rate)));
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
