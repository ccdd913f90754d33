//! `make bench-cleaner` (part of `make bench`): the log cleaner's rate on a local disk. One
//! partition of a compacted topic is filled with 1 KiB values over a key space, then one pass
//! cleans every closed segment; printed: MB read and kept, seconds, MB/s and records/s read,
//! the keys the offset map held, and how much the process's peak memory grew during the pass (the map is
//! bounded by the dedupe buffer, 128 MiB by default as in Kafka).
//!
//! A benchmark, not a test: it prints figures and asserts only that a pass ran. The
//! segments are in the page cache when the pass reads them (they were just written), so the
//! figure is the cleaner's CPU and its fsync of the cleaned segments, not a cold read.
//! Size: KAAS_CLEANER_BENCH_MB (default 256).

use std::time::Instant;

use kaas_storage::testing::BatchBuilder;
use kaas_storage::{AppendOptions, Codec, Engine, LogConfig};
use uuid::Uuid;

const VALUE: usize = 1024;
const PER_BATCH: usize = 100;
const NOW: i64 = 1_700_000_000_000;

struct Shape {
    name: &'static str,
    keys: u64,
    codec: Codec,
    dedupe_buffer_bytes: usize,
}

/// Kilobytes in `field` of /proc/self/status.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

fn clean_once(shape: &Shape, total_mb: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = Engine::on_disk(dir.path()).expect("engine");
    let config = LogConfig {
        cleanup_compact: true,
        cleanup_delete: false,
        min_cleanable_dirty_ratio: 0.0,
        cleaner_dedupe_buffer_bytes: shape.dedupe_buffer_bytes,
        ..LogConfig::default()
    };
    let p = engine.open_partition("bench", Uuid::new_v4(), 0, config).expect("partition");
    p.take_over(1).expect("take-over");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let records = total_mb * 1_000_000 / VALUE as u64;
    // Values cut from a pool of random hex digits: distinct, and about 2:1 compressible.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let pool: Vec<u8> = (0..1 << 16)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            b"0123456789abcdef"[(seed % 16) as usize]
        })
        .collect();
    let mut written = 0u64;
    // Keys visited by a stride coprime to the key space: every key gets its versions spread over
    // the whole log, as updates to a table would.
    let mut next_key = 0u64;
    while written < records {
        let mut builder = BatchBuilder::new().timestamps(NOW).compression(shape.codec);
        for _ in 0..PER_BATCH {
            next_key = (next_key + 7_919) % shape.keys;
            let at = (next_key as usize * 31 + written as usize) % (pool.len() - VALUE);
            builder = builder.record(Some(format!("key-{next_key:08}").as_bytes()), Some(&pool[at..at + VALUE]));
        }
        let batch = builder.build();
        let out = p.append(&batch, AppendOptions { leader_epoch: 1, now_ms: NOW }).expect("append");
        written += PER_BATCH as u64;
        if written.is_multiple_of(10_000) || written >= records {
            rt.block_on(p.wait_durable(out.last_offset)).expect("fsync");
        }
    }
    // The active segment is never cleaned: roll it so that every record is.
    p.take_over(2).expect("roll by a new epoch");

    let rss_before = status_kib("VmRSS:");
    // Resets the peak resident size to the current one (Linux: "5" in clear_refs).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let start = Instant::now();
    let report = p.clean(NOW).expect("clean").expect("a clean is due");
    let seconds = start.elapsed().as_secs_f64();
    let peak_growth_mib = status_kib("VmHWM:").saturating_sub(rss_before) as f64 / 1024.0;
    assert!(report.bytes_written <= report.bytes_read, "{report:?}");
    let (read_mb, written_mb) = (report.bytes_read as f64 / 1e6, report.bytes_written as f64 / 1e6);
    println!(
        "{:<44} {:>8.1} {:>8.1} {:>7.2} {:>8.1} {:>9.0} {:>9} {:>9.1}",
        shape.name,
        read_mb,
        written_mb,
        seconds,
        read_mb / seconds,
        written as f64 / seconds / 1000.0,
        report.keys,
        peak_growth_mib,
    );
}

#[test]
#[ignore = "a benchmark: make bench-cleaner"]
fn cleaner_rate() {
    let total_mb: u64 = std::env::var("KAAS_CLEANER_BENCH_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let default_buffer = LogConfig::default().cleaner_dedupe_buffer_bytes;
    let shapes = [
        Shape { name: "10,000 keys, uncompressed", keys: 10_000, codec: Codec::None, dedupe_buffer_bytes: default_buffer },
        Shape { name: "10,000 keys, lz4 batches of 100", keys: 10_000, codec: Codec::Lz4, dedupe_buffer_bytes: default_buffer },
        Shape { name: "10,000 keys, zstd batches of 100", keys: 10_000, codec: Codec::Zstd, dedupe_buffer_bytes: default_buffer },
        // Before the default buffer's row: the allocator would reuse that row's freed memory.
        Shape { name: "200,000 keys, 2 MiB dedupe buffer", keys: 200_000, codec: Codec::None, dedupe_buffer_bytes: 2 << 20 },
        Shape { name: "200,000 keys, uncompressed", keys: 200_000, codec: Codec::None, dedupe_buffer_bytes: default_buffer },
    ];
    println!("\none pass over {total_mb} MB of {VALUE} B values in batches of {PER_BATCH}, local disk, page cache warm");
    println!("{:<44} {:>8} {:>8} {:>7} {:>8} {:>9} {:>9} {:>9}", "shape", "read MB", "kept MB", "s", "MB/s", "k rec/s", "map keys", "peak MiB");
    for shape in &shapes {
        clean_once(shape, total_mb);
    }
}
