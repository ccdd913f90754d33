//! Engine-only throughput figures (no network): 8 partitions, concurrent producers appending
//! 16 KiB batches of 1 KiB records and waiting for durability (acks=all), then reads.
//!
//! `cargo run --release -p kaas-storage --features testing --example append_bench -- [DIR]`

use std::sync::Arc;
use std::time::Instant;

use kaas_storage::testing::BatchBuilder;
use kaas_storage::{AppendOptions, Engine, LogConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).map(std::path::PathBuf::from);
    let temp = tempfile::tempdir_in(dir.unwrap_or_else(std::env::temp_dir))?;
    let engine = Engine::on_disk(temp.path())?;
    let id = uuid::Uuid::new_v4();
    let parts: Vec<_> = (0..8)
        .map(|i| {
            let p = engine.open_partition("bench", id, i, LogConfig::default())?;
            p.take_over(1)?;
            Ok::<_, kaas_storage::Error>(p)
        })
        .collect::<Result<_, _>>()?;
    let batch = BatchBuilder::new().timestamps(1).records(16, 1024).build();
    let per_producer = 400usize;
    let producers_per_partition = 4;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for p in &parts {
            for _ in 0..producers_per_partition {
                let (p, batch) = (Arc::clone(p), batch.clone());
                tasks.push(tokio::spawn(async move {
                    let buf = batch;
                    for _ in 0..per_producer {
                        let out = p
                            .append(
                                &buf,
                                AppendOptions {
                                    leader_epoch: 1,
                                    now_ms: 1,
                                },
                            )
                            .expect("append");
                        p.wait_durable(out.last_offset).await.expect("durable");
                    }
                }));
            }
        }
        for t in tasks {
            t.await.expect("task");
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let bytes = (parts.len() * producers_per_partition * per_producer * batch.len()) as f64;
    println!(
        "produce (acks=all, 8 partitions): {:.0} MB/s",
        bytes / secs / 1e6
    );
    let start = Instant::now();
    let mut read = 0usize;
    for p in &parts {
        let mut next = 0;
        while next < p.high_watermark() {
            let r = p.read(next, 1 << 20)?;
            read += r.records.len();
            next += kaas_storage::testing::batch_base_offsets(&r.records).len() as i64 * 16;
        }
    }
    println!(
        "read (page cache): {:.0} MB/s",
        read as f64 / start.elapsed().as_secs_f64() / 1e6
    );
    Ok(())
}
