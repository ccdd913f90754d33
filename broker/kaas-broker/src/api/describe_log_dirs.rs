//! DescribeLogDirs: one log directory per broker — the data directory, which in a cluster is
//! the shared volume — holding the partitions this broker leads. A partition's one copy lives
//! wherever its leader is, so `kafka-log-dirs` (which asks every broker and adds up) counts each
//! partition once. Sizes are the segment bytes; there are no followers, so no lag and no
//! future replicas.

use std::path::Path;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_log_dirs_response::{DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};

use super::access::{Op, cluster_allowed};
use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::config::StorageMode;
use crate::router::{Reply, RequestContext};

/// How an in-memory broker names its one "log directory".
const IN_MEMORY_LOG_DIR: &str = "(in memory)";

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DescribeLogDirsRequest) -> Reply<DescribeLogDirsResponse> {
    // Kafka: DESCRIBE on the cluster; v1–2 have no error field and answer no directories.
    if !cluster_allowed(broker, ctx, Op::Describe) {
        let error = if ctx.version >= 3 { ResponseError::ClusterAuthorizationFailed.code() } else { 0 };
        return Reply::Now(DescribeLogDirsResponse::default().with_error_code(error));
    }
    let named: Option<std::collections::HashSet<(&str, i32)>> = request
        .topics
        .as_ref()
        .map(|topics| topics.iter().flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.as_str(), *p))).collect());
    let wanted = |topic: &str, partition: i32| named.as_ref().is_none_or(|named| named.contains(&(topic, partition)));
    let mut topics = Vec::new();
    for topic in broker.topics.list() {
        let partitions: Vec<DescribeLogDirsPartition> = topic
            .partitions()
            .iter()
            .enumerate()
            .filter(|(index, p)| p.is_leader() && wanted(&topic.name, *index as i32))
            .map(|(index, p)| {
                DescribeLogDirsPartition::default()
                    .with_partition_index(index as i32)
                    .with_partition_size(i64::try_from(p.size_bytes()).unwrap_or(i64::MAX))
            })
            .collect();
        if !partitions.is_empty() {
            topics.push(DescribeLogDirsTopic::default().with_name(topic_name(topic.name.clone())).with_partitions(partitions));
        }
    }
    let dir = match &broker.config.storage {
        StorageMode::Disk(dir) => Some(dir.clone()),
        StorageMode::InMemory => None,
    };
    Reply::Later(Box::pin(async move {
        let (log_dir, (total_bytes, usable_bytes)) = match dir {
            // statfs on a network volume can stall: keep it off the runtime's workers.
            Some(dir) => {
                let name = dir.display().to_string();
                (name, tokio::task::spawn_blocking(move || capacity(&dir)).await.unwrap_or((-1, -1)))
            }
            None => (IN_MEMORY_LOG_DIR.to_string(), (-1, -1)),
        };
        let result = DescribeLogDirsResult::default()
            .with_log_dir(str_bytes(log_dir))
            .with_topics(topics)
            .with_total_bytes(total_bytes)
            .with_usable_bytes(usable_bytes);
        DescribeLogDirsResponse::default().with_results(vec![result])
    }))
}

/// The file system's size and the bytes an unprivileged writer may still use, or -1 each when
/// they cannot be read (Kafka's "unknown").
fn capacity(dir: &Path) -> (i64, i64) {
    match nix::sys::statvfs::statvfs(dir) {
        Ok(s) => {
            let bytes = |blocks: u64| i64::try_from(blocks.saturating_mul(s.fragment_size())).unwrap_or(i64::MAX);
            (bytes(s.blocks()), bytes(s.blocks_available()))
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot read the data directory's capacity");
            (-1, -1)
        }
    }
}
