//! A listener's table of open connections: who may connect, when a connection is idle, and
//! which connection gives way when the listener is full. The client listener and the
//! inter-broker one each have their own table and counters.
//!
//! Policy at the caps (issue #15):
//! - `max.connections.per.ip`: a new connection from an address at its cap is closed at once,
//!   as Kafka does.
//! - `max.connections`: Kafka blocks `accept` until a slot frees. kaas does not: a blocked
//!   accept would leave every returning client in the kernel backlog behind connections that
//!   may never send another byte (the brokers' own calls have a listener of their own since the
//!   inter-broker listener, so they no longer queue there either). Instead the newcomer takes the slot of
//!   the least recently active connection that has no request outstanding (what Kafka does to
//!   protect its inter-broker listener, KIP-402): idle and half-sent connections go first, and
//!   the evicted client loses nothing but a reconnect. Connections with requests outstanding
//!   are never evicted (that would drop acknowledgements); when every connection has one, the
//!   newcomer is closed at once and retries after its client's backoff.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::config::ConnectionLimits;

/// Why a new connection was closed as soon as it was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its address already had `max.connections.per.ip` connections.
    PerIpLimit,
    /// The listener was at `max.connections` and every connection had a request outstanding.
    MaxConnections,
    /// Its address opened connections faster than its `connection_creation_rate` quota.
    ConnectionRate,
}

impl Refusal {
    pub const ALL: [Refusal; 3] = [Refusal::PerIpLimit, Refusal::MaxConnections, Refusal::ConnectionRate];

    /// The `reason` label of `kaas_connections_refused_total`.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::PerIpLimit => "per_ip_limit",
            Refusal::MaxConnections => "max_connections",
            Refusal::ConnectionRate => "connection_rate",
        }
    }
}

/// Why the broker closed an established connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closure {
    /// Nothing received and nothing outstanding for `connections.max.idle.ms`.
    Idle,
    /// A frame started but was not complete within the request read timeout.
    RequestReadTimeout,
    /// The client took none of a response's bytes for `connections.max.idle.ms`.
    ResponseStalled,
    /// A newcomer took its slot at `max.connections`.
    Evicted,
    /// The TLS handshake failed or did not finish within the request read timeout.
    TlsHandshake,
}

impl Closure {
    pub const ALL: [Closure; 5] = [Closure::Idle, Closure::RequestReadTimeout, Closure::ResponseStalled, Closure::Evicted, Closure::TlsHandshake];

    /// The `reason` label of `kaas_connections_closed_total`.
    pub fn label(self) -> &'static str {
        match self {
            Closure::Idle => "idle",
            Closure::RequestReadTimeout => "request_read_timeout",
            Closure::ResponseStalled => "response_stalled",
            Closure::Evicted => "evicted",
            Closure::TlsHandshake => "tls_handshake",
        }
    }
}

type ReasonLabel = [(&'static str, &'static str); 1];

/// The listener's counters; clones share them (one set per broker, registered on `/metrics`).
#[derive(Debug, Clone, Default)]
pub struct ListenerMetrics {
    refused: Family<ReasonLabel, Counter>,
    closed: Family<ReasonLabel, Counter>,
    open: Gauge,
    accept_throttle: Counter<f64, AtomicU64>,
}

impl ListenerMetrics {
    pub fn register(&self, registry: &mut Registry) {
        // Every reason starts at 0, so its series exists (and rate() works) before it first
        // happens.
        for reason in Refusal::ALL {
            let _ = self.refused.get_or_create(&[("reason", reason.label())]);
        }
        for reason in Closure::ALL {
            let _ = self.closed.get_or_create(&[("reason", reason.label())]);
        }
        registry.register("connections_refused", "Connections closed as soon as they were accepted, by reason (per_ip_limit, max_connections)", self.refused.clone());
        registry.register("connections_closed", "Connections the broker closed, by reason (idle, request_read_timeout, response_stalled, evicted)", self.closed.clone());
        registry.register("connections_open", "Open connections on the Kafka listener", self.open.clone());
        registry.register("connection_accept_throttle_seconds", "Time the listener waited before accepting, over max.connection.creation.rate", self.accept_throttle.clone());
    }

    /// Seconds the listener has waited over `max.connection.creation.rate`.
    pub fn accept_throttle(&self) -> f64 {
        self.accept_throttle.get()
    }

    pub(crate) fn count_accept_throttle(&self, wait: Duration) {
        self.accept_throttle.inc_by(wait.as_secs_f64());
    }

    pub fn refused(&self, reason: Refusal) -> u64 {
        self.refused.get_or_create(&[("reason", reason.label())]).get()
    }

    pub fn closed(&self, reason: Closure) -> u64 {
        self.closed.get_or_create(&[("reason", reason.label())]).get()
    }

    pub fn open(&self) -> i64 {
        self.open.get()
    }

    pub fn count_closed(&self, reason: Closure) {
        self.closed.get_or_create(&[("reason", reason.label())]).inc();
    }

    pub(crate) fn count_refused(&self, reason: Refusal) {
        self.refused.get_or_create(&[("reason", reason.label())]).inc();
    }
}

/// What the listener and a connection's reader and writer share about that connection.
#[derive(Debug)]
pub struct Activity {
    ip: IpAddr,
    opened: Instant,
    /// Nanoseconds after `opened` of the last byte received or response written.
    last_active_ns: AtomicU64,
    /// Requests read whose responses are not written yet (a long poll, a produce waiting for
    /// its fsync): while there are any, the connection is not idle.
    in_flight: AtomicUsize,
    /// Cancelled to close the connection from outside its reader (eviction, a stalled writer).
    close: CancellationToken,
}

impl Activity {
    fn new(ip: IpAddr) -> Activity {
        Activity {
            ip,
            opened: Instant::now(),
            last_active_ns: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            close: CancellationToken::new(),
        }
    }

    /// Something happened on the connection: bytes arrived or a response went out.
    pub fn touch(&self) {
        let ns = u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_active_ns.fetch_max(ns, Ordering::Relaxed);
    }

    pub fn last_active(&self) -> Instant {
        self.opened + Duration::from_nanos(self.last_active_ns.load(Ordering::Relaxed))
    }

    pub fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A response was written (or, for acks=0, dropped): the connection was active just now.
    pub fn request_finished(&self) {
        self.touch();
        // Saturating: a stray extra call must not wrap to "busy forever".
        let _ = self.in_flight.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
    }

    pub fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }

    /// When the connection is next worth checking for idleness: `max_idle` after its last
    /// activity, or, while requests are outstanding, `max_idle` from now (their completion
    /// touches it, so the check then finds it active).
    pub fn next_idle_check(&self, max_idle: Duration) -> Instant {
        if self.busy() { Instant::now() + max_idle } else { self.last_active() + max_idle }
    }

    /// Whether it has had nothing outstanding and nothing received for `max_idle`.
    pub fn idle_for(&self, max_idle: Duration) -> bool {
        !self.busy() && self.last_active().elapsed() >= max_idle
    }

    /// Asks the connection's reader to close it.
    pub fn close(&self) {
        self.close.cancel();
    }

    /// Resolves once [`Activity::close`] was called.
    pub fn closed(&self) -> WaitForCancellationFuture<'_> {
        self.close.cancelled()
    }
}

#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    by_id: HashMap<u64, Arc<Activity>>,
    per_ip: HashMap<IpAddr, usize>,
}

impl Open {
    fn insert(&mut self, activity: Arc<Activity>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        *self.per_ip.entry(activity.ip).or_default() += 1;
        self.by_id.insert(id, activity);
        id
    }

    fn remove(&mut self, id: u64) -> Option<Arc<Activity>> {
        let activity = self.by_id.remove(&id)?;
        if let Some(count) = self.per_ip.get_mut(&activity.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_ip.remove(&activity.ip);
            }
        }
        Some(activity)
    }

    /// The least recently active connection with nothing outstanding.
    // NB: a scan, only when the listener is full; 10,000 entries take microseconds.
    fn eviction_candidate(&self) -> Option<u64> {
        self.by_id.iter().filter(|(_, a)| !a.busy()).min_by_key(|(_, a)| a.last_active()).map(|(id, _)| *id)
    }
}

/// The listener's open connections, counted in total and per address.
#[derive(Debug)]
pub struct ConnectionTable {
    limits: ConnectionLimits,
    metrics: ListenerMetrics,
    open: Mutex<Open>,
}

impl ConnectionTable {
    pub fn new(limits: ConnectionLimits, metrics: ListenerMetrics) -> Arc<ConnectionTable> {
        Arc::new(ConnectionTable { limits, metrics, open: Mutex::new(Open::default()) })
    }

    /// Admits a new connection from `ip`, evicting an inactive one at the global cap (see the
    /// module's policy), or says why it must be closed at once.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let mut open = self.open.lock();
        let refusal = if open.per_ip.get(&ip).copied().unwrap_or(0) >= self.limits.per_ip_cap(ip) {
            Some(Refusal::PerIpLimit)
        } else if open.by_id.len() >= self.limits.max_connections && !self.evict_one(&mut open) {
            Some(Refusal::MaxConnections)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            self.metrics.count_refused(refusal);
            return Err(refusal);
        }
        let activity = Arc::new(Activity::new(ip));
        let id = open.insert(activity.clone());
        self.metrics.open.inc();
        Ok(Slot { table: self.clone(), id, activity })
    }

    /// Frees the slot of the least recently active idle connection and tells it to close.
    fn evict_one(&self, open: &mut Open) -> bool {
        let Some(victim) = open.eviction_candidate().and_then(|id| open.remove(id)) else { return false };
        victim.close();
        self.metrics.open.dec();
        self.metrics.count_closed(Closure::Evicted);
        tracing::info!(ip = %victim.ip, "closing the least recently active connection: max.connections reached");
        true
    }

    fn release(&self, id: u64) {
        // An evicted connection's slot was already given away.
        if self.open.lock().remove(id).is_some() {
            self.metrics.open.dec();
        }
    }

    pub fn len(&self) -> usize {
        self.open.lock().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One admitted connection's place in the table; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    table: Arc<ConnectionTable>,
    id: u64,
    activity: Arc<Activity>,
}

impl Slot {
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    pub fn metrics(&self) -> &ListenerMetrics {
        &self.table.metrics
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.release(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max: usize, per_ip: usize) -> Arc<ConnectionTable> {
        let limits = ConnectionLimits { max_connections: max, max_connections_per_ip: per_ip, ..ConnectionLimits::default() };
        ConnectionTable::new(limits, ListenerMetrics::default())
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn an_address_at_its_cap_is_refused_and_others_are_not() {
        let t = table(10, 2);
        let held: Vec<_> = [A, A].into_iter().map(|ip| t.admit(ip)).collect();
        assert!(held.iter().all(Result::is_ok));
        assert!(matches!(t.admit(A), Err(Refusal::PerIpLimit)));
        assert!(t.admit(B).is_ok());
        drop(held);
        assert!(t.admit(A).is_ok(), "closing connections frees their address's places");
        assert_eq!(t.metrics.refused(Refusal::PerIpLimit), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_least_recently_active_idle_connection_gives_way() {
        let t = table(3, 10);
        let oldest = t.admit(A);
        tokio::time::advance(Duration::from_secs(1)).await;
        let busy_older = t.admit(A);
        if let Ok(slot) = &busy_older {
            slot.activity().request_started();
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        let newer = t.admit(A);
        let (Ok(oldest), Ok(_busy), Ok(newer)) = (oldest, busy_older, newer) else { panic!("the first three are admitted") };
        tokio::time::advance(Duration::from_secs(1)).await;
        oldest.activity().touch();
        tokio::time::advance(Duration::from_secs(1)).await;
        // `oldest` was active a second ago, `newer` (opened) two seconds ago, `_busy` has a
        // request outstanding.
        let fourth = t.admit(B);
        assert!(fourth.is_ok());
        assert!(newer.activity().close.is_cancelled());
        assert!(!oldest.activity().close.is_cancelled());
        assert_eq!(t.len(), 3);
        drop(newer);
        assert_eq!(t.len(), 3, "an evicted connection's exit does not free its slot twice");
        assert_eq!(t.metrics.closed(Closure::Evicted), 1);
        assert_eq!(t.metrics.open(), 3);
    }

    #[test]
    fn at_the_cap_with_every_connection_busy_the_newcomer_is_refused() {
        let t = table(2, 10);
        let held: Vec<_> = [A, B].into_iter().filter_map(|ip| t.admit(ip).ok()).collect();
        held.iter().for_each(|slot| slot.activity().request_started());
        assert!(matches!(t.admit(B), Err(Refusal::MaxConnections)));
        assert_eq!(t.metrics.refused(Refusal::MaxConnections), 1);
        held[0].activity().request_finished();
        assert!(t.admit(B).is_ok(), "a connection whose answer went out can give way");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_means_nothing_received_and_nothing_outstanding() {
        let activity = Activity::new(A);
        let max_idle = Duration::from_secs(10);
        activity.request_started();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(!activity.idle_for(max_idle), "a long poll outstanding is not idle");
        activity.request_finished();
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(!activity.idle_for(max_idle));
        assert_eq!(activity.next_idle_check(max_idle), Instant::now() + Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(activity.idle_for(max_idle));
    }
}
