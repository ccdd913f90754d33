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

    /// How long the client must wait under `key` now, counting nothing.
    fn current_throttle(&self, broker: &Broker, key: QuotaKey) -> i32 {
        let (user, client_id) = self.names();
        let throttle = broker.quotas.current_throttle(key, user, client_id, Instant::now());
        i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX)
    }

    /// The most one answer may carry under `key`, if a quota applies.
    pub(crate) fn max_in_window(&self, broker: &Broker, key: QuotaKey) -> Option<usize> {
        let (user, client_id) = self.names();
        broker.quotas.max_in_window(key, user, client_id).map(|b| b.clamp(1.0, usize::MAX as f64) as usize)
    }
}

/// The message of a topic refused by the controller mutation quota.
pub(crate) const THROTTLED: &str = "the client is over its controller_mutation_rate quota; retry after the throttle time";

/// KIP-599's controller_mutation_rate over one request's topics (partitions created, added or
/// deleted). In strict mode — the versions whose clients know THROTTLING_QUOTA_EXCEEDED — a
/// topic is refused once its client is over the quota (the mutation that takes it over still
/// passes, as in Kafka); before those versions every topic passes and the answer is throttled.
#[derive(Debug)]
pub(crate) struct Mutations<'a> {
    subject: QuotaSubject,
    broker: &'a Broker,
    strict: bool,
    throttle_ms: i32,
}

impl<'a> Mutations<'a> {
    pub(crate) fn new(broker: &'a Broker, ctx: &RequestContext, strict: bool) -> Mutations<'a> {
        Mutations { subject: QuotaSubject::of(ctx), broker, strict, throttle_ms: 0 }
    }

    /// Whether the next topic may be mutated; `false` (strict mode, over the quota) answers it
    /// THROTTLING_QUOTA_EXCEEDED.
    pub(crate) fn admit(&mut self) -> bool {
        if !self.strict {
            return true;
        }
        let wait = self.subject.current_throttle(self.broker, QuotaKey::ControllerMutationRate);
        self.throttle_ms = self.throttle_ms.max(wait);
        self.subject.mute.extend(std::time::Duration::from_millis(u64::try_from(wait).unwrap_or(0)));
        wait == 0
    }

    /// Counts `partitions` mutated.
    pub(crate) fn done(&mut self, partitions: i32) {
        let wait = self.subject.record(self.broker, QuotaKey::ControllerMutationRate, f64::from(partitions.max(0)));
        self.throttle_ms = self.throttle_ms.max(wait);
    }

    /// The answer's throttle_time_ms.
    pub(crate) fn throttle_ms(&self) -> i32 {
        self.throttle_ms
    }
}
