//! What the volume agent does to the shared volume: topic directories (identity stamp +
//! topic.json) and their reclamation. Everything here is synchronous `Fs` work over
//! `kaas_shared`, so it runs the same against a temp directory, [`MemFs`] and a real mount;
//! callers run it on a blocking thread.
//!
//! Seed 001's three questions, answered for this module:
//! 1. Atomic primitives: the identity stamp is an exclusive create (hard link of a fsynced temp
//!    file), topic.json is temp + fsync + rename, and a directory leaves its topic's path by one
//!    same-directory rename (`kaas_shared::reclaim::rename_aside`).
//! 2. Not atomic: creating a topic (mkdir, stamp, topic.json) and removing a reclaimed tree. Both
//!    are idempotent and re-driven: [`ensure_topic`] converges from any prefix of its steps (the
//!    reconcile is retried until it reports ready), and the periodic sweep re-drives removal
//!    until the tree is gone.
//! 3. One writer: the volume agent of the cluster is the only writer of topic directories'
//!    metadata (brokers write partition data under them, never the stamp or topic.json). A
//!    directory is renamed away only when `assignment.json` shows no broker leading a partition
//!    of that incarnation, so no leader holds descriptors in it (seed 000). Concurrent reconciles
//!    and sweeps inside the agent are serialised by the caller's volume lock.
//!
//! [`MemFs`]: kaas_shared::fs::MemFs

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use kaas_shared::assignment::Assignment;
use kaas_shared::fs::Fs;
use kaas_shared::topic_file::{self, TopicFile};
use kaas_shared::{identity, names, reclaim};
use uuid::Uuid;

use crate::Result;

/// A topic as its live KafkaTopic wants it on the volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredTopic {
    /// Kafka topic name (the directory name).
    pub name: String,
    /// The KafkaTopic's uid.
    pub id: Uuid,
    /// Partitions.
    pub partitions: i32,
    /// Topic configs.
    pub configs: BTreeMap<String, String>,
}

/// Where [`ensure_topic`] got to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// The directory is this incarnation's and topic.json says what the spec says (with
    /// `partitions`, which is never less than what was already on the volume).
    Ready {
        /// Partitions in topic.json.
        partitions: i32,
        /// Whether this call changed topic.json.
        written: bool,
    },
    /// The path holds an earlier incarnation whose partitions a broker still leads; it is
    /// renamed aside once the controller has moved them off.
    WaitingForOldIncarnation {
        /// The earlier incarnation's identity.
        old: Uuid,
    },
    /// The path belongs to another live KafkaTopic with the same Kafka name.
    Conflict {
        /// The other topic's identity.
        other: Uuid,
    },
    /// The path holds another incarnation's stamp and no live identities were given: call
    /// again with them, fresh from the API server, to tell a live topic from a dead one.
    NeedsLiveTopics,
}

/// Whether `assignment` has any partition of incarnation `id` of `topic` led by a broker.
pub fn is_led(assignment: Option<&Assignment>, topic: &str, id: Uuid) -> bool {
    assignment.is_some_and(|a| {
        a.partitions.iter().any(|(key, p)| {
            p.topic_id == id && names::parse_partition_key(key).is_ok_and(|(t, _)| t == topic)
        })
    })
}

/// Converges `<root>/<name>` to `desired`: reclaims a directory of another (dead) incarnation,
/// stamps the identity by exclusive create, writes topic.json atomically. Safe to call again
/// after an interruption at any step. `live_ids` (every live KafkaTopic's identity) is needed
/// only when the path holds another incarnation's stamp; without it that case answers
/// [`Ensured::NeedsLiveTopics`] and changes nothing, so the caller lists the topics only then
/// rather than for every topic it reconciles.
pub fn ensure_topic(
    fs: &dyn Fs,
    root: &Path,
    desired: &DesiredTopic,
    live_ids: Option<&HashSet<Uuid>>,
    assignment: Option<&Assignment>,
) -> Result<Ensured> {
    let dir = root.join(&desired.name);
    match identity::read(fs, &dir) {
        Ok(Some(found)) if found == desired.id => {}
        Ok(Some(other)) => {
            let Some(live_ids) = live_ids else {
                return Ok(Ensured::NeedsLiveTopics);
            };
            if live_ids.contains(&other) {
                return Ok(Ensured::Conflict { other });
            }
            if is_led(assignment, &desired.name, other) {
                return Ok(Ensured::WaitingForOldIncarnation { old: other });
            }
            reclaim::rename_aside(fs, root, &desired.name, other)?;
        }
        // No stamp: our own create, interrupted after mkdir; stamping below finishes it.
        Ok(None) => {}
        // NB: an unreadable stamp cannot come from our exclusive create (it links a complete
        // file into place), so this is damage; leave it for a human rather than guess.
        Err(e) => return Err(e.into()),
    }
    identity::stamp(fs, &dir, desired.id)?;

    let current = topic_file::read(fs, &dir)?;
    // Partitions never shrink: Kafka cannot remove a partition, and the CRD refuses a shrink at
    // admission; an object stored before that rule cannot take data away either.
    let partitions = desired
        .partitions
        .max(current.as_ref().map_or(0, |c| c.partitions));
    let wanted = TopicFile {
        name: desired.name.clone(),
        topic_id: desired.id,
        partitions,
        configs: desired.configs.clone(),
    };
    let written = current.as_ref() != Some(&wanted);
    if written {
        topic_file::write(fs, &dir, &wanted)?;
    }
    Ok(Ensured::Ready {
        partitions,
        written,
    })
}

/// A topic directory on the volume, as a sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDir {
    /// Directory (= topic) name.
    pub name: String,
    /// Its identity stamp; `None` when it has none (an interrupted create).
    pub id: Option<Uuid>,
}

/// Lists the topic directories under `root`: skips hidden entries (reclaim directories, temp
/// files), `__`-prefixed cluster state and anything that cannot be a Kafka topic name
/// (`lost+found`).
pub fn scan(fs: &dyn Fs, root: &Path) -> Result<Vec<TopicDir>> {
    let entries = fs
        .list_dir(root)
        .map_err(|e| kaas_shared::Error::io("list", root, e))?;
    let mut dirs = Vec::new();
    for entry in entries {
        if !entry.is_dir || crate::validate::topic_name(&entry.name).is_err() {
            continue;
        }
        // An unreadable stamp is treated as "no identity": such a directory is never a live
        // topic's, so it is an orphan unless a live topic of that name will stamp it.
        let id = identity::read(fs, &root.join(&entry.name)).ok().flatten();
        dirs.push(TopicDir {
            name: entry.name,
            id,
        });
    }
    Ok(dirs)
}

/// The directories no live KafkaTopic owns: a deleted topic's, or an earlier incarnation's.
/// `live` maps each live KafkaTopic's Kafka name to its uid. A directory without a stamp is left
/// alone while a live topic of that name exists (its reconcile finishes the create).
pub fn orphans(dirs: &[TopicDir], live: &BTreeMap<String, Uuid>) -> Vec<TopicDir> {
    dirs.iter()
        .filter(|d| match (live.get(&d.name), d.id) {
            (Some(live_id), Some(id)) => *live_id != id,
            (Some(_), None) => false,
            (None, _) => true,
        })
        .cloned()
        .collect()
}

/// What one reclamation round did.
#[derive(Debug, Default)]
pub struct RoundReport {
    /// Orphans renamed aside this round.
    pub renamed: Vec<String>,
    /// Orphans still led by a broker (renamed on a later round).
    pub waiting: Vec<String>,
    /// Reclaim directories removed.
    pub removed: usize,
    /// Reclaim directories still there (EBUSY / ENOTEMPTY: retried next round), with why.
    pub pending: Vec<String>,
}

/// Renames aside every orphan no broker leads, then sweeps every reclaim directory.
pub fn reclaim_round(
    fs: &dyn Fs,
    root: &Path,
    orphans: &[TopicDir],
    assignment: Option<&Assignment>,
) -> Result<RoundReport> {
    let mut report = RoundReport::default();
    for orphan in orphans {
        // A directory without a stamp was never served (brokers open only stamped directories),
        // so nothing can lead it; it gets a throwaway name.
        // NB: the orphan list was computed before the caller took the volume lock; a reconcile
        // may since have reclaimed the directory and created a live incarnation at that path.
        // Only what is still the orphan we decided on is renamed.
        let now = identity::read(fs, &root.join(&orphan.name)).ok().flatten();
        if now != orphan.id {
            continue;
        }
        let id = orphan.id.unwrap_or_else(Uuid::new_v4);
        if orphan.id.is_some() && is_led(assignment, &orphan.name, id) {
            report.waiting.push(orphan.name.clone());
            continue;
        }
        if reclaim::rename_aside(fs, root, &orphan.name, id)? {
            report.renamed.push(orphan.name.clone());
        }
    }
    let swept = reclaim::sweep(fs, root)?;
    report.removed = swept.removed.len();
    report.pending = swept
        .pending
        .iter()
        .map(|(path, e)| format!("{}: {e}", path.display()))
        .collect();
    Ok(report)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kaas_shared::assignment::PartitionAssignment;
    use kaas_shared::fs::{MemFs, OpenMode, RealFs};

    fn desired(name: &str, id: Uuid, partitions: i32) -> DesiredTopic {
        DesiredTopic {
            name: name.into(),
            id,
            partitions,
            configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
        }
    }

    fn leading(topic: &str, id: Uuid) -> Assignment {
        let mut a = Assignment::default();
        a.partitions.insert(
            names::partition_key(topic, 0),
            PartitionAssignment {
                topic_id: id,
                leader: 0,
                leader_epoch: 1,
            },
        );
        a
    }

    /// Runs a scenario against MemFs and a real temp directory.
    fn on_both(scenario: impl Fn(&dyn Fs, &Path)) {
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/data")).unwrap();
        scenario(&mem, Path::new("/data"));
        let tmp = tempfile::tempdir().unwrap();
        scenario(&RealFs, tmp.path());
    }

    #[test]
    fn create_is_stamped_and_idempotent() {
        on_both(|fs, root| {
            let id = Uuid::new_v4();
            let d = desired("orders", id, 3);
            let first = ensure_topic(fs, root, &d, Some(&HashSet::new()), None).unwrap();
            assert_eq!(
                first,
                Ensured::Ready {
                    partitions: 3,
                    written: true
                }
            );
            assert_eq!(identity::read(fs, &root.join("orders")).unwrap(), Some(id));
            let again = ensure_topic(fs, root, &d, Some(&HashSet::new()), None).unwrap();
            assert_eq!(
                again,
                Ensured::Ready {
                    partitions: 3,
                    written: false
                }
            );
            let file = topic_file::read(fs, &root.join("orders")).unwrap().unwrap();
            assert_eq!(
                (file.topic_id, file.partitions, file.configs.len()),
                (id, 3, 1)
            );
        });
    }

    #[test]
    fn an_interrupted_create_converges() {
        on_both(|fs, root| {
            let id = Uuid::new_v4();
            // Crashed after mkdir, before the stamp.
            fs.create_dir_all(&root.join("t")).unwrap();
            assert!(matches!(
                ensure_topic(fs, root, &desired("t", id, 1), Some(&HashSet::new()), None).unwrap(),
                Ensured::Ready { .. }
            ));
            // Crashed after the stamp, before topic.json.
            identity::stamp(fs, &root.join("u"), id).unwrap();
            assert!(matches!(
                ensure_topic(fs, root, &desired("u", id, 2), Some(&HashSet::new()), None).unwrap(),
                Ensured::Ready {
                    partitions: 2,
                    written: true
                }
            ));
        });
    }

    #[test]
    fn partitions_grow_and_configs_follow_but_never_shrink() {
        on_both(|fs, root| {
            let id = Uuid::new_v4();
            ensure_topic(fs, root, &desired("t", id, 2), Some(&HashSet::new()), None).unwrap();
            let mut grown = desired("t", id, 5);
            grown
                .configs
                .insert("cleanup.policy".into(), "compact".into());
            assert_eq!(
                ensure_topic(fs, root, &grown, Some(&HashSet::new()), None).unwrap(),
                Ensured::Ready {
                    partitions: 5,
                    written: true
                }
            );
            let file = topic_file::read(fs, &root.join("t")).unwrap().unwrap();
            assert_eq!(
                file.configs.get("cleanup.policy").map(String::as_str),
                Some("compact")
            );
            let shrunk = DesiredTopic {
                partitions: 1,
                ..grown
            };
            assert!(matches!(
                ensure_topic(fs, root, &shrunk, Some(&HashSet::new()), None).unwrap(),
                Ensured::Ready { partitions: 5, .. }
            ));
        });
    }

    #[test]
    fn an_earlier_incarnation_is_reclaimed_before_the_new_one_is_created() {
        on_both(|fs, root| {
            let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
            ensure_topic(fs, root, &desired("t", old, 1), Some(&HashSet::new()), None).unwrap();
            fs.create_dir_all(&root.join("t").join("0")).unwrap();
            fs.open(
                &root
                    .join("t")
                    .join("0")
                    .join("0000000001-00000000000000000000.log"),
                OpenMode::CreateNew,
            )
            .unwrap();

            // While a broker still leads the old incarnation, nothing moves.
            let led = leading("t", old);
            assert_eq!(
                ensure_topic(
                    fs,
                    root,
                    &desired("t", new, 1),
                    Some(&HashSet::new()),
                    Some(&led)
                )
                .unwrap(),
                Ensured::WaitingForOldIncarnation { old }
            );
            assert_eq!(identity::read(fs, &root.join("t")).unwrap(), Some(old));

            // A leader of the *new* incarnation does not hold the old directory.
            let new_led = leading("t", new);
            assert!(matches!(
                ensure_topic(
                    fs,
                    root,
                    &desired("t", new, 1),
                    Some(&HashSet::new()),
                    Some(&new_led)
                )
                .unwrap(),
                Ensured::Ready { .. }
            ));
            assert_eq!(identity::read(fs, &root.join("t")).unwrap(), Some(new));
            assert!(
                fs.stat(&root.join("t").join("0")).is_err(),
                "fresh directory"
            );
            let report = reclaim_round(fs, root, &[], None).unwrap();
            assert_eq!(report.removed, 1);
        });
    }

    #[test]
    fn a_live_topic_of_the_same_name_is_a_conflict_not_a_reclaim() {
        on_both(|fs, root| {
            let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
            ensure_topic(fs, root, &desired("t", a, 1), Some(&HashSet::new()), None).unwrap();
            let live = HashSet::from([a, b]);
            assert_eq!(
                ensure_topic(fs, root, &desired("t", b, 1), Some(&live), None).unwrap(),
                Ensured::Conflict { other: a }
            );
            assert_eq!(identity::read(fs, &root.join("t")).unwrap(), Some(a));
        });
    }

    #[test]
    fn another_incarnation_s_stamp_asks_for_the_live_topics_and_changes_nothing() {
        on_both(|fs, root| {
            let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
            ensure_topic(fs, root, &desired("t", a, 1), None, None).unwrap();
            assert_eq!(
                ensure_topic(fs, root, &desired("t", b, 1), None, None).unwrap(),
                Ensured::NeedsLiveTopics
            );
            assert_eq!(identity::read(fs, &root.join("t")).unwrap(), Some(a));
            // With them, a dead incarnation is renamed aside and the path stamped anew.
            assert!(matches!(
                ensure_topic(
                    fs,
                    root,
                    &desired("t", b, 1),
                    Some(&HashSet::from([b])),
                    None
                )
                .unwrap(),
                Ensured::Ready { .. }
            ));
            assert_eq!(identity::read(fs, &root.join("t")).unwrap(), Some(b));
        });
    }

    #[test]
    fn orphans_are_what_no_live_topic_owns() {
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let dirs = vec![
            TopicDir {
                name: "kept".into(),
                id: Some(a),
            },
            TopicDir {
                name: "deleted".into(),
                id: Some(b),
            },
            TopicDir {
                name: "recreated".into(),
                id: Some(c),
            },
            TopicDir {
                name: "creating".into(),
                id: None,
            },
            TopicDir {
                name: "abandoned".into(),
                id: None,
            },
        ];
        let live = BTreeMap::from([
            ("kept".to_string(), a),
            ("recreated".to_string(), Uuid::new_v4()),
            ("creating".to_string(), Uuid::new_v4()),
        ]);
        let names: Vec<_> = orphans(&dirs, &live).into_iter().map(|d| d.name).collect();
        assert_eq!(names, ["deleted", "recreated", "abandoned"]);
    }

    #[test]
    fn a_stale_orphan_list_never_reclaims_a_new_incarnation() {
        on_both(|fs, root| {
            let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
            ensure_topic(fs, root, &desired("t", old, 1), Some(&HashSet::new()), None).unwrap();
            let stale = orphans(&scan(fs, root).unwrap(), &BTreeMap::new());
            // Meanwhile the topic is recreated.
            ensure_topic(fs, root, &desired("t", new, 1), Some(&HashSet::new()), None).unwrap();
            let report = reclaim_round(fs, root, &stale, None).unwrap();
            assert!(report.renamed.is_empty());
            assert_eq!(identity::read(fs, &root.join("t")).unwrap(), Some(new));
        });
    }

    #[test]
    fn a_deleted_topic_is_reclaimed_once_no_broker_leads_it() {
        on_both(|fs, root| {
            let id = Uuid::new_v4();
            ensure_topic(
                fs,
                root,
                &desired("gone", id, 1),
                Some(&HashSet::new()),
                None,
            )
            .unwrap();
            fs.create_dir_all(&root.join("lost+found")).unwrap();
            fs.create_dir_all(&root.join("__cluster")).unwrap();
            let dirs = scan(fs, root).unwrap();
            assert_eq!(
                dirs,
                [TopicDir {
                    name: "gone".into(),
                    id: Some(id)
                }]
            );
            let orphans = orphans(&dirs, &BTreeMap::new());

            let led = leading("gone", id);
            let report = reclaim_round(fs, root, &orphans, Some(&led)).unwrap();
            assert_eq!(report.waiting, ["gone"]);
            assert!(fs.stat(&root.join("gone")).is_ok());

            let report = reclaim_round(fs, root, &orphans, Some(&Assignment::default())).unwrap();
            assert_eq!((report.renamed.len(), report.removed), (1, 1));
            assert!(fs.stat(&root.join("gone")).is_err());
            // Re-driving a finished reclamation changes nothing.
            let report = reclaim_round(fs, root, &orphans, None).unwrap();
            assert!(report.renamed.is_empty() && report.removed == 0 && report.pending.is_empty());
            assert!(
                fs.stat(&root.join("lost+found")).is_ok()
                    && fs.stat(&root.join("__cluster")).is_ok()
            );
        });
    }
}
