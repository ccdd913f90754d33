//! The protocol edge of client quotas: who a request's bytes are counted for (its user, `ANONYMOUS`
//! without SASL, and its client id), and what a throttle does — the connection is muted and the
//! response carries `throttle_time_ms`.

use std::sync::Arc;

use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use crate::authz::model::ANONYMOUS;
use crate::broker::Broker;
use crate::quota::Mute;
use crate::quota::model::QuotaKey;
use crate::router::RequestContext;

/// A request's quota subject, detached from the request so a deferred answer can count its bytes.
#[derive(Debug, Clone)]
pub(crate) struct QuotaSubject {
    user: Option<Arc<str>>,
    client_id: Option<StrBytes>,
    mute: Arc<Mute>,
}

impl QuotaSubject {
    pub(crate) fn of(ctx: &RequestContext) -> QuotaSubject {
        QuotaSubject { user: ctx.user.clone(), client_id: ctx.header.client_id.clone(), mute: ctx.mute.clone() }
    }

    fn names(&self) -> (&str, &str) {
        (self.user.as_deref().unwrap_or(ANONYMOUS), self.client_id.as_deref().unwrap_or(""))
    }

    /// Counts `amount` (bytes, or percent-seconds of one thread) under `key`; over the quota,
    /// mutes the connection for the throttle and returns it in milliseconds for the response (0
    /// otherwise).
    pub(crate) fn record(&self, broker: &Broker, key: QuotaKey, amount: f64) -> i32 {
        let (user, client_id) = self.names();
        let throttle = broker.quotas.record(key, user, client_id, amount, Instant::now());
        self.mute.extend(throttle);
        i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX)
    }

    /// The most one answer may carry under `key`, if a quota applies.
    pub(crate) fn max_in_window(&self, broker: &Broker, key: QuotaKey) -> Option<usize> {
        let (user, client_id) = self.names();
        broker.quotas.max_in_window(key, user, client_id).map(|b| b.clamp(1.0, usize::MAX as f64) as usize)
    }
}
