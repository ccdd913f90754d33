//! `producer-state.snapshot`: the idempotent-producer dedupe window as of a log offset. Written
//! atomically on segment roll and relinquish, restored on take_over and then brought up to date
//! by replaying the log after its offset. Without it, a leadership move would forget the
//! sequence history and classify in-flight retries as out-of-order instead of duplicates.

use std::path::Path;

use kaas_shared::atomic_file::{read_json_in, stage_json_in, write_json};
use kaas_shared::fs::{Dir, Fs};
use kaas_shared::names::PRODUCER_SNAPSHOT_FILE;
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::producer_state::{ProducerEntry, ProducerStates};
use crate::txn_index::Transactions;

const VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Snapshot {
    version: u32,
    /// Epoch of the leader that wrote it.
    epoch: i32,
    /// The state covers every batch below this offset.
    offset: i64,
    producers: Vec<ProducerEntry>,
    /// Open and aborted transactions (absent in snapshots written before transactions).
    #[serde(default)]
    transactions: Transactions,
}

/// Writes the snapshot of `states` taken by the leader of `epoch`, valid for every batch below
/// `offset`.
pub(crate) fn write(
    fs: &dyn Fs,
    dir: &Path,
    epoch: i32,
    offset: i64,
    states: &ProducerStates,
) -> Result<()> {
    Ok(write_json(fs, &dir.join(PRODUCER_SNAPSHOT_FILE), &Snapshot::of(epoch, offset, states))?)
}

/// [`write`] without its rename: the snapshot under its temp name in `dir`, fsynced, for a
/// caller that renames it into place (returned as `(temp, final)` names) together with other
/// files and then fsyncs the directory once.
pub(crate) fn stage(
    dir: &dyn Dir,
    epoch: i32,
    offset: i64,
    states: &ProducerStates,
) -> Result<(String, String)> {
    let temp = stage_json_in(dir, PRODUCER_SNAPSHOT_FILE, &Snapshot::of(epoch, offset, states))?;
    Ok((temp, PRODUCER_SNAPSHOT_FILE.to_owned()))
}

impl Snapshot {
    fn of(epoch: i32, offset: i64, states: &ProducerStates) -> Snapshot {
        Snapshot {
            version: VERSION,
            epoch,
            offset,
            producers: states.entries(),
            transactions: states.txns.clone(),
        }
    }
}

/// Reads the snapshot: `(epoch, offset, states)`. A missing, unreadable or unknown-version snapshot
/// yields `None` and the caller rebuilds the state from the whole log instead.
pub(crate) fn read(d: &dyn Dir) -> Option<(i32, i64, ProducerStates)> {
    let dir = d.path();
    match read_json_in::<Snapshot>(d, PRODUCER_SNAPSHOT_FILE, "producer snapshot") {
        Ok(Some(s)) if s.version == VERSION => Some((
            s.epoch,
            s.offset,
            ProducerStates::from_entries(s.producers, s.transactions),
        )),
        Ok(Some(s)) => {
            tracing::warn!(dir = %dir.display(), version = s.version, "unknown producer snapshot version; rebuilding from the log");
            None
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "unreadable producer snapshot; rebuilding from the log");
            None
        }
    }
}
