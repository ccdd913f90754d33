use std::sync::Arc;
use std::time::Duration;

use kaas_shared::fs::{FsRef, RealFs};
use kaas_shared::layout::Layout;
use tokio::time::Instant;

use super::model::{Entity, EntityName, InvalidQuota, QuotaFilter, QuotaKey};
use super::{ClientQuotas, QuotaChange, QuotaError};
use crate::controller_file::WriteError;

fn open(dir: &std::path::Path) -> ClientQuotas {
    let fs: FsRef = Arc::new(RealFs);
    match ClientQuotas::open(fs, &Layout::new(dir)) {
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
    let quotas = open(tmp.path());
    let results = quotas.alter(
        vec![
            set(client("app"), QuotaKey::ProducerByteRate, 1024.0),
            set(client("bad"), QuotaKey::ProducerByteRate, 0.5),
            Err(InvalidQuota::IpWithOthers),
            set(client("bytes"), QuotaKey::ConnectionCreationRate, 5.0),
        ],
        false,
        0,
    );
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(matches!(results[1], Err(QuotaError::Invalid(InvalidQuota::BadValue { .. }))), "{:?}", results[1]);
    assert!(matches!(results[2], Err(QuotaError::Invalid(InvalidQuota::IpWithOthers))));
    assert!(matches!(results[3], Err(QuotaError::Invalid(InvalidQuota::KeyNotForEntity(_)))), "{:?}", results[3]);

    // validate_only changes nothing.
    assert!(quotas.alter(vec![set(client("dry"), QuotaKey::ConsumerByteRate, 10.0)], true, 0)[0].is_ok());

    // What was acknowledged is on disk: a broker opening the volume again has it.
    let reopened = open(tmp.path());
    assert_eq!(reopened.describe(&everything()), vec![(client("app"), vec![(QuotaKey::ProducerByteRate, 1024.0)])]);

    // Removing the last value removes the entity.
    let removed = reopened.alter(vec![Ok(QuotaChange { entity: client("app"), ops: vec![(QuotaKey::ProducerByteRate, None)] })], false, 0);
    assert!(removed[0].is_ok());
    assert!(open(tmp.path()).describe(&everything()).is_empty());
}

/// A cluster's brokers over one volume: the controller's change reaches the others at their
/// next refresh (and is applied there); a deposed controller writes nothing.
#[test]
fn the_controller_writes_and_every_broker_follows() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (old_controller, follower) = (open(tmp.path()), open(tmp.path()));
    assert!(old_controller.alter(vec![set(client("app"), QuotaKey::ProducerByteRate, 1000.0)], false, 3)[0].is_ok());
    let t0 = Instant::now();
    assert_eq!(follower.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "app", 20_000.0, t0), Duration::ZERO, "not read yet");
    follower.refresh().unwrap_or_else(|e| panic!("refresh: {e}"));
    assert_eq!(follower.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "app", 20_000.0, t0), Duration::from_secs(10), "applied");

    // The follower becomes controller (epoch 4); its change keeps the old controller's.
    assert!(follower.alter(vec![set(client("db"), QuotaKey::ConsumerByteRate, 10.0)], false, 4)[0].is_ok());
    assert_eq!(open(tmp.path()).describe(&everything()).len(), 2);
    let refused = old_controller.alter(vec![set(client("x"), QuotaKey::ProducerByteRate, 1.0)], false, 3);
    assert!(matches!(refused[0], Err(QuotaError::File(WriteError::NotController { found: 4, ours: 3 }))), "{refused:?}");
    // A change that is invalid says so, whoever writes.
    let invalid = old_controller.alter(vec![Err(InvalidQuota::IpWithOthers)], false, 3);
    assert!(matches!(invalid[0], Err(QuotaError::Invalid(_))), "{invalid:?}");
    assert_eq!(open(tmp.path()).describe(&everything()).len(), 2);
}

#[test]
fn clients_over_their_bound_are_throttled_and_others_are_not() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let quotas = open(tmp.path());
    let t0 = Instant::now();
    assert_eq!(quotas.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "app", 1e9, t0), Duration::ZERO, "no quotas");
    assert!(quotas.alter(vec![set(client("app"), QuotaKey::ProducerByteRate, 1000.0)], false, 0)[0].is_ok());
    // 10 s of quota at once (the span is at least 10 windows): at the bound, no wait.
    assert_eq!(quotas.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "app", 10_000.0, t0), Duration::ZERO);
    // 5,000 bytes more: half again the bound over 10 s, 5 s to wait.
    assert_eq!(quotas.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "app", 5_000.0, t0), Duration::from_secs(5));
    assert_eq!(quotas.record(QuotaKey::ProducerByteRate, "ANONYMOUS", "other", 1e9, t0), Duration::ZERO, "no quota for other");
    assert_eq!(quotas.record(QuotaKey::ConsumerByteRate, "ANONYMOUS", "app", 1e9, t0), Duration::ZERO, "no fetch quota");
    assert_eq!(quotas.max_in_window(QuotaKey::ProducerByteRate, "ANONYMOUS", "app"), Some(10_000.0));
}
