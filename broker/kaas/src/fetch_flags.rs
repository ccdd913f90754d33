//! The fetch path's flags (Kafka's `fetch.max.bytes` and fetch-session cache settings, plus
//! kaas's own bounds on a Fetch's wait and partitions), each with a `KAAS_*` environment
//! variable, collected into a [`FetchConfig`].

use std::time::Duration;

use clap::Args;
use kaas_broker::api::fetch::FetchConfig;
use kaas_broker::fetch_session::SessionLimits;

#[derive(Debug, Clone, Args)]
pub(crate) struct FetchFlags {
    /// fetch.max.bytes: record bytes in one Fetch response at most, whatever the client asks
    /// for (the first batch of a response may exceed it, up to its topic's max.message.bytes,
    /// so a consumer always progresses: KIP-74).
    #[arg(long, env = "KAAS_FETCH_MAX_BYTES", default_value_t = 57_671_680, value_parser = clap::value_parser!(u64).range(1024..=i32::MAX as u64))]
    fetch_max_bytes: u64,
    /// The longest a Fetch waits for data, whatever its max_wait_ms asks (kaas-specific; 30 s is
    /// clients' default request.timeout.ms).
    #[arg(long, env = "KAAS_FETCH_MAX_WAIT_MS", default_value_t = 30_000)]
    fetch_max_wait_ms: u64,
    /// Partitions one Fetch request (or one fetch session) may name; a larger request is refused
    /// with INVALID_REQUEST (kaas-specific).
    #[arg(long, env = "KAAS_FETCH_MAX_PARTITIONS", default_value_t = 10_000)]
    fetch_max_partitions: usize,
    /// max.incremental.fetch.session.cache.slots: fetch sessions held at once (0 disables them).
    #[arg(long, env = "KAAS_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS", default_value_t = 1_000)]
    max_incremental_fetch_session_cache_slots: usize,
    /// min.incremental.fetch.session.eviction.ms: a fetch session younger than this is never
    /// evicted to make room; an older one only by a larger session, or once unused this long.
    #[arg(long, env = "KAAS_MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS", default_value_t = 120_000)]
    min_incremental_fetch_session_eviction_ms: u64,
    /// Fetch sessions one client address may hold at once (kaas-specific).
    #[arg(long, env = "KAAS_FETCH_SESSIONS_PER_CLIENT", default_value_t = 100)]
    fetch_sessions_per_client: usize,
    /// Send fetched record sets of 64 KiB and more from the page cache to plain-TCP sockets by
    /// splice, with no copy through the broker, as Kafka's sendfile does (kaas-specific; TLS
    /// connections always copy). False: read them into memory and write them.
    #[arg(long, env = "KAAS_FETCH_ZERO_COPY", default_value_t = true, action = clap::ArgAction::Set)]
    fetch_zero_copy: bool,
}

impl FetchFlags {
    pub(crate) fn config(&self) -> FetchConfig {
        FetchConfig {
            max_bytes: usize::try_from(self.fetch_max_bytes).unwrap_or(usize::MAX),
            max_wait: Duration::from_millis(self.fetch_max_wait_ms),
            sessions: SessionLimits {
                slots: self.max_incremental_fetch_session_cache_slots,
                eviction_age: Duration::from_millis(self.min_incremental_fetch_session_eviction_ms),
                per_client: self.fetch_sessions_per_client,
                max_partitions: self.fetch_max_partitions,
            },
            zero_copy: self.fetch_zero_copy,
        }
    }
}
