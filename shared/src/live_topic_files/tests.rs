use std::collections::BTreeMap;
use std::path::Path;

use uuid::Uuid;

use super::*;
use crate::fs::{Fs, MemFs};
use crate::live_topics::LiveTopic;

fn layout() -> Layout {
    Layout::new("/data")
}

fn create(fs: &MemFs, name: &str, id: Uuid, partitions: i32) -> crate::Result<()> {
    let dir = layout().topic_dir(name);
    identity::stamp(fs, &dir, id)?;
    topic_file::write(fs, &dir, &TopicFile { name: name.into(), topic_id: id, partitions, configs: BTreeMap::new() })
}

fn live(topics: &[(&str, Uuid, Option<&str>)]) -> LiveSet {
    topics.iter().map(|(name, id, revision)| (name.to_string(), LiveTopic { id: *id, revision: revision.map(str::to_string) })).collect()
}

fn partitions(found: &Found) -> Vec<(String, i32)> {
    found.topics.iter().map(|t| (t.name.clone(), t.partitions)).collect()
}

#[test]
fn a_directory_is_read_again_only_when_its_topic_s_revision_changes() -> crate::Result<()> {
    let fs = MemFs::new();
    let id = Uuid::new_v4();
    create(&fs, "orders", id, 3)?;
    let files = LiveTopicFiles::default();
    assert_eq!(partitions(&files.read(&fs, &layout(), &live(&[("orders", id, Some("10"))]))), vec![("orders".into(), 3)]);
    // The file changes under the same revision: what was read stands (nothing is read).
    topic_file::write(&fs, &layout().topic_dir("orders"), &TopicFile { name: "orders".into(), topic_id: id, partitions: 6, configs: BTreeMap::new() })?;
    assert_eq!(partitions(&files.read(&fs, &layout(), &live(&[("orders", id, Some("10"))]))), vec![("orders".into(), 3)]);
    // The operator reports the write: a new revision reads the directory.
    assert_eq!(partitions(&files.read(&fs, &layout(), &live(&[("orders", id, Some("11"))]))), vec![("orders".into(), 6)]);
    // Without revisions every call reads.
    topic_file::write(&fs, &layout().topic_dir("orders"), &TopicFile { name: "orders".into(), topic_id: id, partitions: 8, configs: BTreeMap::new() })?;
    assert_eq!(partitions(&files.read(&fs, &layout(), &live(&[("orders", id, None)]))), vec![("orders".into(), 8)]);
    Ok(())
}

#[test]
fn only_directories_of_live_incarnations_are_found() -> crate::Result<()> {
    let fs = MemFs::new();
    let (old, new, other) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    create(&fs, "recreated", old, 1)?;
    create(&fs, "kept", other, 2)?;
    fs.create_dir_all(&layout().topic_dir("unwritten")).map_err(|e| crate::Error::io("mkdir", Path::new("unwritten"), e))?;
    let files = LiveTopicFiles::default();
    let set = live(&[("recreated", new, Some("1")), ("kept", other, Some("1")), ("unwritten", Uuid::new_v4(), Some("1")), ("absent", Uuid::new_v4(), None)]);
    let found = files.read(&fs, &layout(), &set);
    assert_eq!(partitions(&found), vec![("kept".into(), 2)]);
    assert!(found.unreadable.is_empty() && found.disagreeing.is_empty(), "{found:?}");
    // Once its directory is the new incarnation's, it is found at the same revision: a left-out
    // directory is never kept.
    fs.rename(&layout().topic_dir("recreated"), Path::new("/data/.aside")).map_err(|e| crate::Error::io("rename", Path::new("recreated"), e))?;
    create(&fs, "recreated", new, 4)?;
    assert_eq!(partitions(&files.read(&fs, &layout(), &set)), vec![("kept".into(), 2), ("recreated".into(), 4)]);
    Ok(())
}

#[test]
fn an_unreadable_directory_is_reported_and_a_disagreeing_stamp_is_not_unreadable() -> crate::Result<()> {
    let fs = MemFs::new();
    let (id, stamped) = (Uuid::new_v4(), Uuid::new_v4());
    let dir = layout().topic_dir("corrupt");
    fs.create_dir_all(&dir).map_err(|e| crate::Error::io("mkdir", &dir, e))?;
    crate::atomic_file::write_atomic(&fs, &dir.join(crate::names::TOPIC_FILE), b"{ not json")?;
    let mismatched = layout().topic_dir("mismatched");
    identity::stamp(&fs, &mismatched, stamped)?;
    topic_file::write(&fs, &mismatched, &TopicFile { name: "mismatched".into(), topic_id: id, partitions: 1, configs: BTreeMap::new() })?;
    let found = LiveTopicFiles::default().read(&fs, &layout(), &live(&[("corrupt", id, Some("1")), ("mismatched", id, Some("1"))]));
    assert!(found.topics.is_empty());
    let names = |problems: &[(String, crate::Error)]| problems.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>();
    assert_eq!((names(&found.unreadable), names(&found.disagreeing)), (vec!["corrupt".to_string()], vec!["mismatched".to_string()]));
    Ok(())
}
