//! Golden partition directories (checked in under `tests/fixtures/`): a torn tail and a
//! scribbled tail left by a crashed epoch-1 leader whose manifest lags the log. Recovery must
//! cut exactly the bad batch and serve the rest with their original offsets.

use std::path::{Path, PathBuf};

use kaas_shared::fs::OpenMode;
use kaas_storage::LogConfig;
use kaas_storage::testing::BatchBuilder;

use super::support::*;

const SEGMENT: &str = "0000000001-00000000000000000000.log";

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The intact log: three batches of two records, offsets 0..6, written at epoch 1.
fn intact_log() -> Vec<u8> {
    let mut log = Vec::new();
    for (i, tag) in ["a", "b", "c"].into_iter().enumerate() {
        let mut b = BatchBuilder::new()
            .timestamps(NOW)
            .base_offset(2 * i as i64);
        for j in 0..2 {
            b = b.record(Some(tag.as_bytes()), Some(format!("{tag}-{j}").as_bytes()));
        }
        let mut bytes = b.build();
        bytes[12..16].copy_from_slice(&1i32.to_be_bytes()); // partitionLeaderEpoch (outside the CRC)
        log.extend(bytes);
    }
    log
}

/// Copies a fixture directory into the volume's partition directory.
fn install(v: &Volume, name: &str) {
    v.partition(LogConfig::default());
    for entry in std::fs::read_dir(fixture_dir(name)).unwrap() {
        let entry = entry.unwrap();
        let target = v.partition_dir().join(entry.file_name());
        let f = v.fs().open(&target, OpenMode::CreateNew).unwrap();
        f.write_all_at(&std::fs::read(entry.path()).unwrap(), 0)
            .unwrap();
    }
}

fn check_recovery(v: &Volume, fixture: &str) {
    install(v, fixture);
    let intact = intact_log();
    let last_batch = intact.len() as u64 / 3;
    let on_disk = v.file_len(SEGMENT);
    let p = v.partition(LogConfig::default());
    let report = p.take_over(2).unwrap();
    assert_eq!(
        report.manifest_high_watermark, 2,
        "the fixture's manifest lags the log"
    );
    assert_eq!(report.log_end_offset, 4);
    assert_eq!(report.truncated_bytes, on_disk - 2 * last_batch);
    assert_eq!(v.read_file(SEGMENT), intact[..2 * last_batch as usize]);
    let records = read_all(&p);
    assert_eq!(
        records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(values(&records), vec!["a-0", "a-1", "b-0", "b-1"]);
}

fn golden_torn_tail(v: &Volume) {
    check_recovery(v, "torn-tail");
}
scenario!(golden_torn_tail);

fn golden_scribbled_tail(v: &Volume) {
    check_recovery(v, "scribbled-tail");
}
scenario!(golden_scribbled_tail);

/// The checked-in fixtures are exactly what this code builds, so they can be reviewed as code.
/// `KAAS_REGENERATE_FIXTURES=1 cargo test -p kaas-storage --test scenarios golden_fixtures`
/// rewrites them instead of checking them.
#[test]
fn golden_fixtures_are_reproducible() {
    let log = intact_log();
    let manifest = br#"{"epoch":1,"highWatermark":2,"logStartOffset":0}"#;
    let torn = &log[..log.len() - 17];
    let mut scribbled = log.clone();
    let n = scribbled.len();
    scribbled[n - 30..n - 20].copy_from_slice(b"SCRIBBLED!");
    let regenerate = std::env::var_os("KAAS_REGENERATE_FIXTURES").is_some();
    for (name, bytes) in [("torn-tail", torn.to_vec()), ("scribbled-tail", scribbled)] {
        let dir = fixture_dir(name);
        if regenerate {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(SEGMENT), &bytes).unwrap();
            std::fs::write(dir.join("manifest.json"), manifest).unwrap();
        }
        assert_eq!(std::fs::read(dir.join(SEGMENT)).unwrap(), bytes, "{name} segment differs from its generator");
        assert_eq!(std::fs::read(dir.join("manifest.json")).unwrap(), manifest, "{name} manifest differs");
    }
}
