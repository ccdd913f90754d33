//! Share sessions (KIP-932): the partitions a member fetches from on this broker, and the
//! epoch that orders its requests. Epoch 0 opens a session (replacing the member's previous
//! one), each request then names the session's next epoch, and -1 closes it. Unlike fetch
//! sessions they are keyed by group and member, and a member's records stay acquired only as
//! long as it has a session: when the session closes or is replaced, or its connection goes,
//! what it holds is given back (done by the caller with [`Closed`]).
//!
//! Bounded: at most [`MAX_SESSIONS`] sessions (Kafka's `group.share.max.share.sessions`), each
//! with at most [`MAX_PARTITIONS`] partitions.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;

use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use uuid::Uuid;

/// Sessions kept at most.
pub const MAX_SESSIONS: usize = 2000;
/// Partitions one session names at most.
pub const MAX_PARTITIONS: usize = 10_000;

/// The epoch that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// The epoch that closes one.
pub const FINAL_EPOCH: i32 = -1;

/// A partition by topic id.
pub type SharePartitionKey = (Uuid, i32);

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    next_epoch: i32,
    partitions: BTreeSet<SharePartitionKey>,
    /// The connection that opened it.
    owner: SocketAddr,
    /// Tells the sessions apart across replacements (for the connection-close cleanup).
    serial: u64,
}

/// A session that ended: its member's records in these partitions go back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub group: String,
    pub member: String,
    pub partitions: Vec<SharePartitionKey>,
}

/// What a request may do in its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begun {
    /// The partitions to fetch from (the session's, after the request's changes).
    pub partitions: Vec<SharePartitionKey>,
    /// A session this request replaced or closed.
    pub closed: Option<Closed>,
    /// A new session's serial, for [`ShareSessions::connection_closed`].
    pub opened: Option<u64>,
}

/// Sessions by (group, member), and the last serial handed out.
type Table = (HashMap<(String, String), Session>, u64);

#[derive(Debug, Default)]
pub struct ShareSessions {
    sessions: Mutex<Table>,
}

impl ShareSessions {
    /// Runs the session step of a ShareFetch (`add`, `forget`) or a ShareAcknowledge (both
    /// empty) at `epoch`.
    pub fn begin(&self, group: &str, member: &str, epoch: i32, owner: SocketAddr, add: &[SharePartitionKey], forget: &[SharePartitionKey]) -> Result<Begun, ResponseError> {
        let mut guard = self.sessions.lock();
        let (sessions, serials) = &mut *guard;
        let key = (group.to_owned(), member.to_owned());
        let closed_of = |s: Session| Closed { group: group.to_owned(), member: member.to_owned(), partitions: s.partitions.into_iter().collect() };
        match epoch {
            INITIAL_EPOCH => {
                let previous = sessions.remove(&key);
                if previous.is_none() && sessions.len() >= MAX_SESSIONS {
                    return Err(ResponseError::ShareSessionLimitReached);
                }
                let partitions: BTreeSet<SharePartitionKey> = add.iter().copied().collect();
                if partitions.len() > MAX_PARTITIONS {
                    return Err(ResponseError::InvalidRequest);
                }
                *serials += 1;
                let serial = *serials;
                sessions.insert(key, Session { next_epoch: 1, partitions: partitions.clone(), owner, serial });
                Ok(Begun { partitions: partitions.into_iter().collect(), closed: previous.map(closed_of), opened: Some(serial) })
            }
            FINAL_EPOCH => match sessions.remove(&key) {
                Some(s) => Ok(Begun { partitions: Vec::new(), closed: Some(closed_of(s)), opened: None }),
                None => Err(ResponseError::ShareSessionNotFound),
            },
            e if e > 0 => {
                let session = sessions.get_mut(&key).ok_or(ResponseError::ShareSessionNotFound)?;
                if session.next_epoch != e {
                    return Err(ResponseError::InvalidShareSessionEpoch);
                }
                // Kafka's order: the request's partitions are added, then the forgotten ones
                // removed — a client names a partition it is leaving only to acknowledge its
                // records, and forgets it in the same request (kept, it would be handed records
                // the client drops, locked until their acquisition lock runs out).
                let mut next = session.partitions.clone();
                next.extend(add.iter().copied());
                for p in forget {
                    next.remove(p);
                }
                if next.len() > MAX_PARTITIONS {
                    return Err(ResponseError::InvalidRequest);
                }
                session.partitions = next;
                session.next_epoch = if e == i32::MAX { 1 } else { e + 1 };
                session.owner = owner;
                Ok(Begun { partitions: session.partitions.iter().copied().collect(), closed: None, opened: None })
            }
            _ => Err(ResponseError::InvalidShareSessionEpoch),
        }
    }

    /// The connection that opened session `serial` closed: the session ends if it still is
    /// that one and still on that connection.
    pub fn connection_closed(&self, group: &str, member: &str, serial: u64, owner: SocketAddr) -> Option<Closed> {
        let mut guard = self.sessions.lock();
        let key = (group.to_owned(), member.to_owned());
        let ours = guard.0.get(&key).is_some_and(|s| s.serial == serial && s.owner == owner);
        let s = if ours { guard.0.remove(&key)? } else { return None };
        Some(Closed { group: group.to_owned(), member: member.to_owned(), partitions: s.partitions.into_iter().collect() })
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        self.sessions.lock().0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn epochs_order_a_members_requests() {
        let s = ShareSessions::default();
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let (t, u) = ((Uuid::from_u128(1), 0), (Uuid::from_u128(1), 1));
        assert_eq!(s.begin("g", "m", 1, peer, &[], &[]), Err(ResponseError::ShareSessionNotFound));
        let first = s.begin("g", "m", 0, peer, &[t], &[]).unwrap();
        assert_eq!((first.partitions, first.closed), (vec![t], None));
        assert_eq!(s.begin("g", "m", 2, peer, &[], &[]), Err(ResponseError::InvalidShareSessionEpoch));
        assert_eq!(s.begin("g", "m", 1, peer, &[u], &[t]).unwrap().partitions, vec![u]);
        assert_eq!(s.begin("g", "m", 2, peer, &[], &[]).unwrap().partitions, vec![u]);
        // A partition named only for its acknowledgements and forgotten in the same request
        // leaves the session.
        assert_eq!(s.begin("g", "m", 3, peer, &[t], &[t]).unwrap().partitions, vec![u]);
        assert_eq!(s.begin("g", "m", 4, peer, &[u], &[u]).unwrap().partitions, vec![]);
        assert_eq!(s.begin("g", "m", 5, peer, &[u], &[]).unwrap().partitions, vec![u]);
        // A new session replaces the old one, whose records go back.
        let again = s.begin("g", "m", 0, peer, &[t], &[]).unwrap();
        assert_eq!(again.closed.map(|c| c.partitions), Some(vec![u]));
        let serial = again.opened.unwrap();
        assert_eq!(s.connection_closed("g", "m", serial + 1, peer), None);
        assert_eq!(s.connection_closed("g", "m", serial, peer).map(|c| c.partitions), Some(vec![t]));
        assert!(s.is_empty());
        s.begin("g", "m", 0, peer, &[], &[]).unwrap();
        assert!(s.begin("g", "m", -1, peer, &[], &[]).unwrap().closed.is_some());
        assert_eq!(s.begin("g", "m", -1, peer, &[], &[]), Err(ResponseError::ShareSessionNotFound));
    }
}
