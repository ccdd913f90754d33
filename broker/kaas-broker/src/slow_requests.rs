//! The slow-request log: a request whose own time passed `--slow-request-ms` is logged at WARN
//! with its client, API and the phase that took the time, so one misbehaving client or a disk
//! that stalls shows in the logs without turning on request tracing.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;

use crate::router::RequestContext;

/// What the log line names, kept from the request until its answer is ready.
#[derive(Debug, Clone)]
pub struct SlowRequestLog {
    threshold: Duration,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: Option<StrBytes>,
    peer: SocketAddr,
}

impl SlowRequestLog {
    /// `None` when the log is off, so nothing is cloned per request.
    pub fn for_request(threshold: Option<Duration>, ctx: &RequestContext) -> Option<SlowRequestLog> {
        Some(SlowRequestLog {
            threshold: threshold?,
            api: ctx.api_key,
            version: ctx.version,
            correlation_id: ctx.header.correlation_id,
            client_id: ctx.header.client_id.clone(),
            peer: ctx.peer,
        })
    }

    /// Logs the request if its local time, plus its wait unless the client asked for that wait,
    /// passed the threshold; returns the phase it named. `deferred_at` is when the handler
    /// deferred its answer.
    pub fn answered(&self, started: Instant, deferred_at: Option<Instant>) -> Option<&'static str> {
        let now = Instant::now();
        let local = deferred_at.unwrap_or(now).duration_since(started);
        let wait = deferred_at.map_or(Duration::ZERO, |at| now.duration_since(at));
        let counted_wait = if waits_by_request(self.api) { Duration::ZERO } else { wait };
        if local + counted_wait < self.threshold {
            return None;
        }
        let phase = if counted_wait > local { "wait" } else { "local" };
        tracing::warn!(
            api = ?self.api,
            version = self.version,
            correlation_id = self.correlation_id,
            client_id = self.client_id.as_deref().unwrap_or(""),
            peer = %self.peer,
            local_ms = local.as_millis() as u64,
            wait_ms = wait.as_millis() as u64,
            phase,
            "slow request"
        );
        Some(phase)
    }
}

/// APIs whose deferred answer waits as long as the client asked (a fetch's max_wait_ms, a
/// rebalance's timeout): that wait is not slowness.
fn waits_by_request(api: ApiKey) -> bool {
    matches!(api, ApiKey::Fetch | ApiKey::JoinGroup | ApiKey::SyncGroup)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(api: ApiKey) -> SlowRequestLog {
        let peer = SocketAddr::from(([127, 0, 0, 1], 40000));
        SlowRequestLog { threshold: Duration::from_millis(100), api, version: 0, correlation_id: 7, client_id: None, peer }
    }

    fn ago(ms: u64) -> Instant {
        Instant::now().checked_sub(Duration::from_millis(ms)).unwrap_or_else(Instant::now)
    }

    #[test]
    fn names_the_phase_that_took_the_time() {
        assert_eq!(log(ApiKey::Metadata).answered(ago(500), None), Some("local"));
        assert_eq!(log(ApiKey::Metadata).answered(ago(5), None), None);
        // A produce that waited 400 ms for its fsync after 1 ms of handling.
        assert_eq!(log(ApiKey::Produce).answered(ago(401), Some(ago(400))), Some("wait"));
    }

    #[test]
    fn a_wait_the_client_asked_for_is_not_slowness() {
        assert_eq!(log(ApiKey::Fetch).answered(ago(5000), Some(ago(4999))), None);
        assert_eq!(log(ApiKey::JoinGroup).answered(ago(5000), Some(ago(4999))), None);
        // ... but a fetch that took long to read is.
        assert_eq!(log(ApiKey::Fetch).answered(ago(5000), Some(ago(200))), Some("local"));
    }
}
