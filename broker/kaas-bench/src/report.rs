//! Printing figures as a table.

/// One line of results.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) mb_per_s: f64,
    pub(crate) msgs_per_s: f64,
    pub(crate) p50_ms: Option<f64>,
    pub(crate) p99_ms: Option<f64>,
    pub(crate) p999_ms: Option<f64>,
}

impl Row {
    /// A row of throughput only (no latency figures).
    pub(crate) fn throughput(name: &str, bytes: u64, messages: u64, elapsed: std::time::Duration) -> Row {
        let secs = elapsed.as_secs_f64().max(1e-9);
        Row { name: name.to_string(), mb_per_s: bytes as f64 / secs / 1e6, msgs_per_s: messages as f64 / secs, p50_ms: None, p99_ms: None, p999_ms: None }
    }
}

pub(crate) fn print_table(rows: &[Row]) {
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    println!("{:<30} {:>10} {:>12} {:>10} {:>10} {:>10}", "scenario", "MB/s", "msgs/s", "p50 ms", "p99 ms", "p99.9 ms");
    for r in rows {
        println!(
            "{:<30} {:>10.1} {:>12.0} {:>10} {:>10} {:>10}",
            r.name,
            r.mb_per_s,
            r.msgs_per_s,
            ms(r.p50_ms),
            ms(r.p99_ms),
            ms(r.p999_ms)
        );
    }
}

/// Applies `key=value` librdkafka settings given on the command line (`--set`); a setting
/// without `=` is ignored.
pub(crate) fn apply_settings(config: &mut rdkafka::ClientConfig, settings: &[String]) {
    for setting in settings {
        if let Some((key, value)) = setting.split_once('=') {
            config.set(key, value);
        }
    }
}
