//! Which brokers came back at another address than the one clients last learned for them.
//!
//! librdkafka keeps a coordinator's address by broker id and looks the coordinator up again only
//! when that id changes, so a broker back at a new address (a pod that advertises its IP gets a
//! new one) holds no coordinator shard for a while (see `balancer::balance`). The address to
//! compare with is the one last *published* for the id, not only the previous assignment's: a
//! broker whose session expired was dropped from the assignment, and when it comes back on a new
//! port its clients still hold the address from before the drop.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kaas_shared::assignment::BrokerEndpoint;

/// The controller's memory of published addresses and of the brokers seen at new ones.
#[derive(Debug, Default)]
pub struct Readdressing {
    /// The address each broker id was last published at, in an assignment this controller read
    /// or wrote. A new controller starts from the assignment it reads.
    published: BTreeMap<i32, BrokerEndpoint>,
    /// Brokers seen at a new address, and when.
    seen_at: BTreeMap<i32, Instant>,
}

impl Readdressing {
    /// Remembers the addresses `brokers` publishes.
    pub fn published(&mut self, brokers: &BTreeMap<i32, BrokerEndpoint>) {
        self.published.extend(brokers.iter().map(|(id, endpoint)| (*id, endpoint.clone())));
    }

    /// The brokers of `alive` that registered at another address than their last published one
    /// within `handoff` before `now`.
    pub fn readdressed(
        &mut self,
        alive: &BTreeSet<i32>,
        registered: &BTreeMap<i32, BrokerEndpoint>,
        now: Instant,
        handoff: Duration,
    ) -> BTreeSet<i32> {
        for id in alive {
            if let (Some(was), Some(is)) = (self.published.get(id), registered.get(id))
                && !was.same_client_address(is)
            {
                self.seen_at.insert(*id, now);
            }
        }
        self.seen_at.retain(|_, at| now.saturating_duration_since(*at) < handoff);
        self.seen_at.keys().filter(|id| alive.contains(id)).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HANDOFF: Duration = Duration::from_secs(20);

    fn at(port: u16) -> BrokerEndpoint {
        BrokerEndpoint { host: "127.0.0.1".into(), port, interbroker: None }
    }

    #[test]
    fn a_broker_back_on_a_new_port_after_dropping_out_is_readdressed() {
        let mut book = Readdressing::default();
        let t0 = Instant::now();
        book.published(&[(1, at(9092)), (2, at(9093))].into());
        // Broker 2's session expires: the next assignment no longer lists it.
        book.published(&[(1, at(9092))].into());
        let alive: BTreeSet<i32> = [1].into();
        assert!(book.readdressed(&alive, &[(1, at(9092)), (2, at(9093))].into(), t0, HANDOFF).is_empty());
        // It comes back on another port: its clients still hold 9093.
        let alive: BTreeSet<i32> = [1, 2].into();
        let registered = [(1, at(9092)), (2, at(9200))].into();
        assert_eq!(book.readdressed(&alive, &registered, t0 + Duration::from_secs(1), HANDOFF), [2].into());
        book.published(&registered);
        // Still within the hand-off: still readdressed, though its new address is published now.
        assert_eq!(book.readdressed(&alive, &registered, t0 + Duration::from_secs(20), HANDOFF), [2].into());
        assert!(book.readdressed(&alive, &registered, t0 + Duration::from_secs(22), HANDOFF).is_empty(), "the hand-off is over");
    }

    #[test]
    fn the_same_address_or_a_broker_never_published_is_not_readdressed() {
        let mut book = Readdressing::default();
        let now = Instant::now();
        book.published(&[(1, at(9092))].into());
        let alive: BTreeSet<i32> = [1, 3].into();
        assert!(book.readdressed(&alive, &[(1, at(9092)), (3, at(9300))].into(), now, HANDOFF).is_empty());
        // A readdressed broker that is not alive is not reported (nor kept past the hand-off).
        assert!(book.readdressed(&[3].into(), &[(1, at(9999)), (3, at(9300))].into(), now, HANDOFF).is_empty());
        // Back with a new inter-broker address only (a pod's new IP): clients saw no change.
        let moved = BrokerEndpoint { interbroker: Some("10.0.0.9:9091".into()), ..at(9092) };
        assert!(book.readdressed(&alive, &[(1, moved)].into(), now, HANDOFF).is_empty());
    }
}
