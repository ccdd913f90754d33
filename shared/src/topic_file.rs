//! `topic.json`: a topic's configuration, written atomically into its directory.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Result;
use crate::atomic_file::{read_json, write_json};
use crate::fs::Fs;
use crate::names::TOPIC_FILE;

/// The schema of `topic.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicFile {
    /// Topic name.
    pub name: String,
    /// The topic incarnation's identity (also stamped in `topic.id`).
    pub topic_id: Uuid,
    /// Number of partitions.
    pub partitions: i32,
    /// Topic-level configuration overrides, Kafka names (`retention.ms`, ...).
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

/// Writes `<topic_dir>/topic.json` atomically.
pub fn write(fs: &dyn Fs, topic_dir: &Path, topic: &TopicFile) -> Result<()> {
    write_json(fs, &topic_dir.join(TOPIC_FILE), topic)
}

/// Reads `<topic_dir>/topic.json`; `Ok(None)` if absent.
pub fn read(fs: &dyn Fs, topic_dir: &Path) -> Result<Option<TopicFile>> {
    read_json(fs, &topic_dir.join(TOPIC_FILE), "topic.json")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn round_trip() {
        let fs = MemFs::new();
        let dir = Path::new("/data/t");
        crate::fs::Fs::create_dir_all(&fs, dir).unwrap();
        let topic = TopicFile {
            name: "t".into(),
            topic_id: Uuid::new_v4(),
            partitions: 3,
            configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
        };
        assert_eq!(read(&fs, dir).unwrap(), None);
        write(&fs, dir, &topic).unwrap();
        assert_eq!(read(&fs, dir).unwrap(), Some(topic));
    }
}
