//! Every on-volume name, built and parsed by exactly one function pair.
//!
//! Numbers are zero-padded to a fixed width so that names sort like the numbers they carry and
//! a parse can insist on the exact shape. A name that does not parse is an error, never a skip.

use uuid::Uuid;

use crate::{Error, Result};

/// The cluster-wide directory under the volume root.
pub const CLUSTER_DIR: &str = "__cluster";
/// The layout-version stamp, in [`CLUSTER_DIR`].
pub const LAYOUT_FILE: &str = "layout.json";
/// Directory of claimed producer-id blocks, in [`CLUSTER_DIR`].
pub const PRODUCER_IDS_DIR: &str = "producer-ids";
/// A topic directory's identity stamp.
pub const TOPIC_ID_FILE: &str = "topic.id";
/// A topic directory's configuration.
pub const TOPIC_FILE: &str = "topic.json";
/// A partition's manifest (epoch, high watermark, log start offset).
pub const MANIFEST_FILE: &str = "manifest.json";
/// A partition's idempotent-producer snapshot.
pub const PRODUCER_SNAPSHOT_FILE: &str = "producer-state.snapshot";
/// A partition's share-group state (KIP-932): a shard log written by the partition's leader,
/// fenced by its leader epoch.
pub const SHARE_STATE_DIR: &str = "share-groups";
/// The controller-written partition and group placement, in [`CLUSTER_DIR`].
pub const ASSIGNMENT_FILE: &str = "assignment.json";
/// The brokers' shared secret (`interbroker_key`), in [`CLUSTER_DIR`].
pub const INTERBROKER_KEY_FILE: &str = "interbroker.key";
/// The KafkaUsers' credentials, ACLs and quotas (`kafka_users`), in [`CLUSTER_DIR`].
pub const KAFKA_USERS_FILE: &str = "kafka-users.json";
/// Directory of broker registrations (one file per broker, written by that broker), in
/// [`CLUSTER_DIR`].
pub const BROKERS_DIR: &str = "brokers";
/// Directory of the consumer-group shards, in [`CLUSTER_DIR`].
pub const GROUPS_DIR: &str = "groups";
/// Directory of the transaction-state shards, in [`CLUSTER_DIR`]. Each shard directory is named
/// and laid out like a group shard's (the same epoch-fenced key/value log).
pub const TRANSACTIONS_DIR: &str = "transactions";

const SHARD_WIDTH: usize = 4;
const GROUP_LOG_EXT: &str = "log";
const GROUP_SNAPSHOT_EXT: &str = "snapshot";

const EPOCH_WIDTH: usize = 10;
const OFFSET_WIDTH: usize = 20;
const TEMP_SUFFIX: &str = ".tmp";
/// Prefix NFS gives a file that was unlinked while still open somewhere ("silly rename").
const NFS_GHOST_PREFIX: &str = ".nfs";

/// The three files of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SegmentFileKind {
    /// The record batches.
    Log,
    /// The sparse offset index.
    Index,
    /// The sparse time index.
    TimeIndex,
}

impl SegmentFileKind {
    /// All kinds, `.log` last (so deleting in this order never leaves an index without its log
    /// ... only a log without its index, which is rebuilt).
    pub const ALL: [SegmentFileKind; 3] = [
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::Log,
    ];

    fn extension(self) -> &'static str {
        match self {
            SegmentFileKind::Log => "log",
            SegmentFileKind::Index => "index",
            SegmentFileKind::TimeIndex => "timeindex",
        }
    }
}

/// What a segment file name says: the leader epoch that created it and its base offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentName {
    /// Leader epoch of the leader that created the segment.
    pub epoch: i32,
    /// Offset of the first batch in the segment.
    pub base_offset: i64,
    /// Which of the segment's files.
    pub kind: SegmentFileKind,
}

/// Builds `<epoch:010>-<baseOffset:020>.<log|index|timeindex>`.
pub fn segment_file_name(epoch: i32, base_offset: i64, kind: SegmentFileKind) -> Result<String> {
    non_negative("epoch", i64::from(epoch))?;
    non_negative("base offset", base_offset)?;
    Ok(format!(
        "{epoch:0EPOCH_WIDTH$}-{base_offset:0OFFSET_WIDTH$}.{}",
        kind.extension()
    ))
}

/// Parses a name built by [`segment_file_name`].
pub fn parse_segment_file_name(name: &str) -> Result<SegmentName> {
    let bad = |reason| Error::BadName {
        name: name.to_owned(),
        reason,
    };
    let (stem, ext) = name.split_once('.').ok_or_else(|| bad("no extension"))?;
    let kind = [
        SegmentFileKind::Log,
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
    ]
    .into_iter()
    .find(|k| k.extension() == ext)
    .ok_or_else(|| bad("not a .log, .index or .timeindex file"))?;
    let (epoch, base) = parse_epoch_and_number(stem).map_err(bad)?;
    Ok(SegmentName {
        epoch,
        base_offset: base,
        kind,
    })
}

/// `<epoch:010>-<number:020>`, the stem shared by segment and group-shard file names.
fn parse_epoch_and_number(stem: &str) -> std::result::Result<(i32, i64), &'static str> {
    let (epoch, number) = stem
        .split_once('-')
        .ok_or("no '-' between epoch and number")?;
    let epoch = fixed_width_number(epoch, EPOCH_WIDTH).ok_or("bad epoch digits")?;
    let number = fixed_width_number(number, OFFSET_WIDTH).ok_or("bad number digits")?;
    let epoch = i32::try_from(epoch).map_err(|_| "epoch out of range")?;
    Ok((epoch, number))
}

/// Builds a group shard's directory name: the shard number, zero-padded to four digits.
pub fn group_shard_dir_name(shard: u32) -> String {
    format!("{shard:0SHARD_WIDTH$}")
}

/// Parses a name built by [`group_shard_dir_name`].
pub fn parse_group_shard_dir_name(name: &str) -> Result<u32> {
    fixed_width_number(name, SHARD_WIDTH)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| Error::BadName {
            name: name.to_owned(),
            reason: "not a group shard number",
        })
}

/// The two kinds of file in a group shard directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupFileKind {
    /// Append-only log of changes made after the snapshot with the same stamp.
    Log,
    /// The whole shard state as of everything logged before this stamp.
    Snapshot,
}

impl GroupFileKind {
    fn extension(self) -> &'static str {
        match self {
            GroupFileKind::Log => GROUP_LOG_EXT,
            GroupFileKind::Snapshot => GROUP_SNAPSHOT_EXT,
        }
    }
}

/// What a group shard file name says: the owner epoch that wrote it and the compaction
/// generation within that epoch. `(epoch, generation)` orders every file of a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupFileName {
    /// Epoch of the shard owner that wrote the file.
    pub epoch: i32,
    /// Compaction generation within the epoch.
    pub generation: i64,
    /// Log or snapshot.
    pub kind: GroupFileKind,
}

/// Builds `<epoch:010>-<generation:020>.<log|snapshot>`.
pub fn group_file_name(epoch: i32, generation: i64, kind: GroupFileKind) -> Result<String> {
    non_negative("epoch", i64::from(epoch))?;
    non_negative("generation", generation)?;
    Ok(format!(
        "{epoch:0EPOCH_WIDTH$}-{generation:0OFFSET_WIDTH$}.{}",
        kind.extension()
    ))
}

/// What a name found in a group shard directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupShardEntry {
    /// A log or snapshot file.
    File(GroupFileName),
    /// A temp file of an interrupted atomic write; the string is its target.
    Temp(String),
    /// An NFS silly-rename ghost.
    NfsGhost,
}

/// Classifies a name found in a group shard directory. Anything unknown is an error.
pub fn parse_group_shard_entry(name: &str) -> Result<GroupShardEntry> {
    let bad = |reason| Error::BadName {
        name: name.to_owned(),
        reason,
    };
    if name.starts_with(NFS_GHOST_PREFIX) {
        return Ok(GroupShardEntry::NfsGhost);
    }
    if name.ends_with(TEMP_SUFFIX) {
        return parse_temp_file_name(name).map(GroupShardEntry::Temp);
    }
    let (stem, ext) = name.split_once('.').ok_or_else(|| bad("no extension"))?;
    let kind = [GroupFileKind::Log, GroupFileKind::Snapshot]
        .into_iter()
        .find(|k| k.extension() == ext)
        .ok_or_else(|| bad("not a .log or .snapshot file"))?;
    let (epoch, generation) = parse_epoch_and_number(stem).map_err(bad)?;
    Ok(GroupShardEntry::File(GroupFileName {
        epoch,
        generation,
        kind,
    }))
}

/// Builds the name of a temp file that will be renamed over `target` (same directory). The
/// random part keeps two racing writers of the same target from sharing a temp file.
pub fn temp_file_name(target: &str) -> String {
    format!("{target}.{}{TEMP_SUFFIX}", Uuid::new_v4().simple())
}

/// Parses a name built by [`temp_file_name`], returning the target it was meant for.
pub fn parse_temp_file_name(name: &str) -> Result<String> {
    let bad = |reason| Error::BadName {
        name: name.to_owned(),
        reason,
    };
    let stem = name
        .strip_suffix(TEMP_SUFFIX)
        .ok_or_else(|| bad("no .tmp suffix"))?;
    let (target, random) = stem.rsplit_once('.').ok_or_else(|| bad("no random part"))?;
    if target.is_empty() || random.len() != 32 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("malformed temp name"));
    }
    Ok(target.to_owned())
}

/// Builds the name of a claimed producer-id block: `<blockStart:020>`.
pub fn producer_id_block_name(block_start: i64) -> Result<String> {
    non_negative("producer-id block start", block_start)?;
    Ok(format!("{block_start:0OFFSET_WIDTH$}"))
}

/// Parses a name built by [`producer_id_block_name`].
pub fn parse_producer_id_block_name(name: &str) -> Result<i64> {
    fixed_width_number(name, OFFSET_WIDTH).ok_or_else(|| Error::BadName {
        name: name.to_owned(),
        reason: "not a producer-id block",
    })
}

/// Builds a partition directory name (the partition number in decimal).
pub fn partition_dir_name(partition: i32) -> Result<String> {
    non_negative("partition", i64::from(partition))?;
    Ok(partition.to_string())
}

/// Parses a name built by [`partition_dir_name`].
pub fn parse_partition_dir_name(name: &str) -> Result<i32> {
    let bad = |reason| Error::BadName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty()
        || !name.bytes().all(|b| b.is_ascii_digit())
        || (name.len() > 1 && name.starts_with('0'))
    {
        return Err(bad("not a partition number"));
    }
    name.parse()
        .map_err(|_| bad("partition number out of range"))
}

/// What a name found in a partition directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionEntry {
    /// A segment file.
    Segment(SegmentName),
    /// [`MANIFEST_FILE`].
    Manifest,
    /// [`PRODUCER_SNAPSHOT_FILE`].
    ProducerSnapshot,
    /// [`SHARE_STATE_DIR`].
    ShareState,
    /// A temp file of an interrupted atomic write; the string is its target.
    Temp(String),
    /// An NFS silly-rename ghost (`.nfsXXXX`): a file unlinked while open elsewhere.
    NfsGhost,
}

/// Classifies a name found in a partition directory. Anything unknown is an error.
pub fn parse_partition_entry(name: &str) -> Result<PartitionEntry> {
    match name {
        MANIFEST_FILE => return Ok(PartitionEntry::Manifest),
        PRODUCER_SNAPSHOT_FILE => return Ok(PartitionEntry::ProducerSnapshot),
        SHARE_STATE_DIR => return Ok(PartitionEntry::ShareState),
        _ => {}
    }
    if name.starts_with(NFS_GHOST_PREFIX) {
        return Ok(PartitionEntry::NfsGhost);
    }
    if name.ends_with(TEMP_SUFFIX) {
        return parse_temp_file_name(name).map(PartitionEntry::Temp);
    }
    parse_segment_file_name(name).map(PartitionEntry::Segment)
}

fn non_negative(what: &'static str, value: i64) -> Result<()> {
    if value < 0 {
        Err(Error::NegativeInName { what, value })
    } else {
        Ok(())
    }
}

fn fixed_width_number(digits: &str, width: usize) -> Option<i64> {
    if digits.len() != width || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_sort_by_number() {
        let a = segment_file_name(7, 42, SegmentFileKind::Log).unwrap();
        assert_eq!(a, "0000000007-00000000000000000042.log");
        let b = segment_file_name(7, 1_000, SegmentFileKind::Log).unwrap();
        assert!(a < b);
        for kind in SegmentFileKind::ALL {
            let name = segment_file_name(i32::MAX, i64::MAX, kind).unwrap();
            let parsed = parse_segment_file_name(&name).unwrap();
            assert_eq!(
                parsed,
                SegmentName {
                    epoch: i32::MAX,
                    base_offset: i64::MAX,
                    kind
                }
            );
        }
    }

    #[test]
    fn malformed_names_are_errors() {
        for bad in [
            "",
            "0000000007-00000000000000000042",
            "0000000007-00000000000000000042.txt",
            "7-42.log",
            "000000007-00000000000000000042.log",
            "0000000007_00000000000000000042.log",
            "00000000a7-00000000000000000042.log",
            "9999999999-00000000000000000042.log",
            "0000000007-99999999999999999999.log",
            "0000000007-+0000000000000000042.log",
        ] {
            assert!(
                matches!(parse_segment_file_name(bad), Err(Error::BadName { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            segment_file_name(-1, 0, SegmentFileKind::Log),
            Err(Error::NegativeInName { .. })
        ));
    }

    #[test]
    fn temp_names_name_their_target() {
        let t = temp_file_name(MANIFEST_FILE);
        assert_eq!(parse_temp_file_name(&t).unwrap(), MANIFEST_FILE);
        assert_eq!(
            parse_partition_entry(&t).unwrap(),
            PartitionEntry::Temp(MANIFEST_FILE.into())
        );
        assert!(parse_temp_file_name("manifest.json.tmp").is_err());
    }

    #[test]
    fn group_names_round_trip() {
        assert_eq!(group_shard_dir_name(7), "0007");
        assert_eq!(parse_group_shard_dir_name("0007").unwrap(), 7);
        assert!(parse_group_shard_dir_name("7").is_err());
        let log = group_file_name(3, 12, GroupFileKind::Log).unwrap();
        assert_eq!(log, "0000000003-00000000000000000012.log");
        let snap = group_file_name(3, 12, GroupFileKind::Snapshot).unwrap();
        assert_eq!(
            parse_group_shard_entry(&snap).unwrap(),
            GroupShardEntry::File(GroupFileName {
                epoch: 3,
                generation: 12,
                kind: GroupFileKind::Snapshot
            })
        );
        assert!(parse_group_shard_entry("0000000003-00000000000000000012.index").is_err());
        assert!(parse_group_shard_entry("offsets.json").is_err());
        assert!(group_file_name(-1, 0, GroupFileKind::Log).is_err());
        let t = temp_file_name(&snap);
        assert_eq!(parse_group_shard_entry(&t).unwrap(), GroupShardEntry::Temp(snap));
    }

    #[test]
    fn partition_entries_classify() {
        assert_eq!(
            parse_partition_entry("manifest.json").unwrap(),
            PartitionEntry::Manifest
        );
        assert_eq!(
            parse_partition_entry(".nfs0000abcd").unwrap(),
            PartitionEntry::NfsGhost
        );
        assert!(parse_partition_entry("stray.txt").is_err());
        assert_eq!(parse_partition_dir_name("12").unwrap(), 12);
        assert!(parse_partition_dir_name("012").is_err());
        assert!(parse_partition_dir_name("-1").is_err());
        assert_eq!(
            parse_producer_id_block_name(&producer_id_block_name(5000).unwrap()).unwrap(),
            5000
        );
    }
}

/// The file a broker registers itself in: `<brokerId:010>.json`.
pub fn broker_file_name(broker_id: i32) -> Result<String> {
    let id = u32::try_from(broker_id).map_err(|_| Error::NegativeInName { what: "broker id", value: broker_id.into() })?;
    Ok(format!("{id:0width$}.json", width = EPOCH_WIDTH))
}

/// Parses [`broker_file_name`].
pub fn parse_broker_file_name(name: &str) -> Result<i32> {
    let bad = |reason| Error::BadName { name: name.to_string(), reason };
    let digits = name.strip_suffix(".json").ok_or_else(|| bad("not a .json file"))?;
    if digits.len() != EPOCH_WIDTH || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("broker id is not 10 digits"));
    }
    digits.parse().map_err(|_| bad("broker id out of range"))
}

/// The key of a partition in assignment.json: `<topic>/<partition>`.
pub fn partition_key(topic: &str, partition: i32) -> String {
    format!("{topic}/{partition}")
}

/// Parses [`partition_key`] from the right, so a topic name containing the separator still
/// splits correctly (gh #61).
pub fn parse_partition_key(key: &str) -> Result<(&str, i32)> {
    let bad = |reason| Error::BadName { name: key.to_string(), reason };
    let (topic, partition) = key.rsplit_once('/').ok_or_else(|| bad("no '/' before the partition"))?;
    if topic.is_empty() {
        return Err(bad("empty topic"));
    }
    let partition = partition.parse::<i32>().map_err(|_| bad("partition is not a number"))?;
    if partition < 0 {
        return Err(bad("negative partition"));
    }
    Ok((topic, partition))
}

#[cfg(test)]
mod cluster_name_tests {
    use super::*;

    #[test]
    fn broker_files_and_partition_keys_round_trip() {
        assert_eq!(broker_file_name(3).ok().as_deref(), Some("0000000003.json"));
        assert_eq!(parse_broker_file_name("0000000003.json").ok(), Some(3));
        assert!(parse_broker_file_name("3.json").is_err());
        assert!(parse_broker_file_name("0000000003.yaml").is_err());
        assert!(broker_file_name(-1).is_err());
        assert_eq!(parse_partition_key(&partition_key("a/b", 7)).ok(), Some(("a/b", 7)));
        assert!(parse_partition_key("t/-1").is_err());
        assert!(parse_partition_key("t").is_err());
        assert!(parse_partition_key("/3").is_err());
    }
}
