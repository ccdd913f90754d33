use std::sync::Arc;
use std::time::Duration;

use kaas_shared::fs::{FsRef, RealFs};
use kaas_shared::layout::Layout;
use tokio::time::Instant;

use super::model::{Entity, EntityName, InvalidQuota, QuotaFilter, QuotaKey};
use super::{ClientQuotas, QuotaChange, QuotaError};

fn open(dir: &std::path::Path, writable: bool) -> ClientQuotas {
    let fs: FsRef = Arc::new(RealFs);
    match ClientQuotas::open(fs, &Layout::new(dir), writable) {
        Ok(q) => q,
        Err(e) => panic!("open: {e}"),
    }
}

fn client(name: &str) -> Entity {
    Entity { client_id: Some(EntityName::Named(name.into())), ..Entity::default() }
}

fn set(entity: Entity, key: QuotaKey, value: f64) -> Result<QuotaChange, InvalidQuota> {
    Ok(QuotaChange { entity, ops: vec![(key, Some(value))] })
}

fn everything() -> QuotaFilter {
    QuotaFilter::parse([], false).expect("empty filter")
}

#[test]
fn changes_are_durable_validated_one_by_one_and_removable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let quotas = open(tmp.path(), true);
    let results = quotas.alter(
        vec![
            set(client("app"), QuotaKey::ProducerByteRate, 1024.0),
            set(client("bad"), QuotaKey::ProducerByteRate, 0.5),
            Err(InvalidQuota::IpWithOthers),
            set(client("bytes"), QuotaKey::ConnectionCreationRate, 5.0),
        ],
        false,
    );
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(matches!(results[1], Err(QuotaError::Invalid(InvalidQuota::BadValue { .. }))), "{:?}", results[1]);
    assert!(matches!(results[2], Err(QuotaError::Invalid(InvalidQuota::IpWithOthers))));
    assert!(matches!(results[3], Err(QuotaError::Invalid(InvalidQuota::KeyNotForEntity(_)))), "{:?}", results[3]);

    // validate_only changes nothing.
    assert!(quotas.alter(vec![set(client("dry"), QuotaKey::ConsumerByteRate, 10.0)], true)[0].is_ok());

    // What was acknowledged is on disk: a broker opening the volume again has it.
    let reopened = open(tmp.path(), true);
    assert_eq!(reopened.describe(&everything()), vec![(client("app"), vec![(QuotaKey::ProducerByteRate, 1024.0)])]);

    // Removing the last value removes the entity.
    let removed = reopened.alter(vec![Ok(QuotaChange { entity: client("app"), ops: vec![(QuotaKey::ProducerByteRate, None)] })], false);
    assert!(removed[0].is_ok());
    assert!(open(tmp.path(), true).describe(&everything()).is_empty());
}

#[test]
fn a_cluster_mode_broker_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let quotas = open(tmp.path(), false);
    let results = quotas.alter(vec![set(client("app"), QuotaKey::ProducerByteRate, 1024.0)], false);
    assert!(matches!(results[0], Err(QuotaError::ClusterMode)));
    assert!(quotas.describe(&everything()).is_empty());
}

#[test]
fn clients_over_their_bound_are_throttled_and_others_are_not() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let quotas = open(tmp.path(), true);
    let t0 = Instant::now();
    assert_eq!(quotas.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "app", 1e9, t0), Duration::ZERO, "no quotas");
    assert!(quotas.alter(vec![set(client("app"), QuotaKey::ProducerByteRate, 1000.0)], false)[0].is_ok());
    // 10 s of quota at once (the span is at least 10 windows): at the bound, no wait.
    assert_eq!(quotas.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "app", 10_000.0, t0), Duration::ZERO);
    // 5,000 bytes more: half again the bound over 10 s, 5 s to wait.
    assert_eq!(quotas.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "app", 5_000.0, t0), Duration::from_secs(5));
    assert_eq!(quotas.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "other", 1e9, t0), Duration::ZERO, "no quota for other");
    assert_eq!(quotas.record(QuotaKey::ConsumerByteRate, "ANONYMOUS", "app", 1e9, t0), Duration::ZERO, "no fetch quota");
    assert_eq!(quotas.max_in_window(QuotaKey::ProducerByteRate, "ANONYMOUS", "app"), Some(10_000.0));
}
