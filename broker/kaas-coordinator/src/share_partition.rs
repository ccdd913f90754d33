//! KIP-932 share partitions: which records of one partition one share group has delivered,
//! to whom, how often, and which are done. The partition's leader keeps this state (it alone
//! hands records out, so two members never hold a record at once) and persists it in the
//! partition's own directory ([`store`]).
//!
//! The in-flight window is `[start, end)`: records below `start` (Kafka's SPSO) are done
//! (acknowledged or archived), records from `end` (SPEO) on were never delivered. Inside the
//! window every offset has a state: *available* (to be delivered again), *acquired* by one
//! member until its lock expires, *acknowledged* or *archived* (rejected, delivered too often,
//! or not a record at all: a gap the consumer found). The window holds at most
//! `max_locks` offsets, which bounds the state's memory and file size.

pub mod store;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The largest window a persisted state may claim.
const MAX_WINDOW: i64 = 1_000_000;

/// A share group's settings for its partitions (group configs, else broker defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareSettings {
    /// `share.record.lock.duration.ms`: how long a delivered record stays with its member.
    pub lock_duration: Duration,
    /// `share.delivery.count.limit`: a record delivered this often is archived instead of
    /// being made available again.
    pub delivery_limit: i16,
    /// `group.share.partition.max.record.locks`: the in-flight window's size.
    pub max_locks: usize,
}

impl Default for ShareSettings {
    fn default() -> ShareSettings {
        ShareSettings { lock_duration: Duration::from_secs(30), delivery_limit: 5, max_locks: 2000 }
    }
}

/// How a consumer acknowledges an offset (the wire's AcknowledgeType values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Not a record (a control record, a compacted-away offset): archived.
    Gap,
    Accept,
    /// Deliver again (to anyone), unless the delivery limit is reached.
    Release,
    /// Never deliver again.
    Reject,
    /// Keep it: the lock starts over (KIP-1222).
    Renew,
}

impl Ack {
    pub fn from_wire(t: i8) -> Option<Ack> {
        Some(match t {
            0 => Ack::Gap,
            1 => Ack::Accept,
            2 => Ack::Release,
            3 => Ack::Reject,
            4 => Ack::Renew,
            _ => return None,
        })
    }
}

/// One acknowledged range: one type for all its offsets, or one per offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<Ack>,
}

/// Why an acknowledgement was refused (nothing of it applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    #[error("the records are not acquired by this member (lock expired, acknowledged already, or never delivered to it)")]
    InvalidRecordState,
    #[error("malformed acknowledgement batch")]
    InvalidRequest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    Archived,
}

#[derive(Debug, Clone)]
struct InFlight {
    state: RecordState,
    deliveries: i16,
    /// The member holding an acquired record, and until when.
    owner: Option<(Arc<str>, Instant)>,
}

impl InFlight {
    fn done(&self) -> bool {
        matches!(self.state, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// A delivered range: offsets `first..=last`, each delivered `deliveries` times now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub deliveries: i16,
}

/// One share group's state of one partition.
#[derive(Debug, Clone)]
pub struct SharePartitionState {
    start: i64,
    end: i64,
    records: BTreeMap<i64, InFlight>,
}

/// What is persisted: the window and every offset in it that is not plainly available, as
/// ranges. Acquisitions are not persisted: after a move their records are available again
/// (with the delivery count last persisted), as in Kafka.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistedState {
    pub start: i64,
    pub end: i64,
    /// `[first, last, state, deliveries]`.
    pub ranges: Vec<(i64, i64, RecordState, i16)>,
}

impl SharePartitionState {
    /// A fresh state whose first record to deliver is `start`.
    pub fn new(start: i64) -> SharePartitionState {
        SharePartitionState { start, end: start, records: BTreeMap::new() }
    }

    /// The share-partition start offset (SPSO).
    pub fn start_offset(&self) -> i64 {
        self.start
    }

    /// Offsets in flight (delivered and not yet done).
    pub fn in_flight(&self) -> usize {
        self.records.values().filter(|r| !r.done()).count()
    }

    /// Offsets in the window whose delivery is complete (acknowledged or archived): they are
    /// no longer owed to the group (KIP-1226's delivery-complete count, which the lag leaves out).
    pub fn delivery_complete(&self) -> i64 {
        self.records.values().filter(|r| r.done()).count() as i64
    }

    pub fn restore(p: &PersistedState) -> SharePartitionState {
        let mut s = SharePartitionState::new(p.start);
        // The window never outgrows `max_locks`; a file claiming more is not believed (it
        // would cost memory per offset).
        s.end = p.end.clamp(p.start, p.start.saturating_add(MAX_WINDOW));
        for offset in s.start..s.end {
            s.records.insert(offset, InFlight { state: RecordState::Available, deliveries: 0, owner: None });
        }
        for &(first, last, state, deliveries) in &p.ranges {
            for offset in first.max(s.start)..=last.min(s.end - 1) {
                let state = if state == RecordState::Acquired { RecordState::Available } else { state };
                s.records.insert(offset, InFlight { state, deliveries, owner: None });
            }
        }
        s.advance();
        s
    }

    pub fn persisted(&self) -> PersistedState {
        let mut ranges: Vec<(i64, i64, RecordState, i16)> = Vec::new();
        for (&offset, r) in &self.records {
            let state = if r.state == RecordState::Acquired { RecordState::Available } else { r.state };
            if state == RecordState::Available && r.deliveries == 0 {
                continue;
            }
            match ranges.last_mut() {
                Some(last) if last.1 + 1 == offset && last.2 == state && last.3 == r.deliveries => last.1 = offset,
                _ => ranges.push((offset, offset, state, r.deliveries)),
            }
        }
        PersistedState { start: self.start, end: self.end, ranges }
    }

    /// Moves the window to `offset` and forgets everything in flight (AlterShareGroupOffsets).
    pub fn reset(&mut self, offset: i64) {
        *self = SharePartitionState::new(offset);
    }

    /// Records below the log start are gone (retention, DeleteRecords): the window moves up.
    /// Returns whether anything changed.
    pub fn follow_log_start(&mut self, log_start: i64) -> bool {
        if self.start >= log_start {
            return false;
        }
        self.records = self.records.split_off(&log_start);
        self.start = log_start;
        self.end = self.end.max(log_start);
        true
    }

    /// Locks that expired by `now` give their records back (or archive them at the delivery
    /// limit). Returns whether anything changed.
    pub fn expire_locks(&mut self, now: Instant, settings: &ShareSettings) -> bool {
        let mut changed = false;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired && r.owner.as_ref().is_some_and(|(_, until)| *until <= now) {
                release(r, settings);
                changed = true;
            }
        }
        if changed {
            self.advance();
        }
        changed
    }

    /// When the next lock expires, if any record is acquired.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.records.values().filter_map(|r| r.owner.as_ref().map(|(_, until)| *until)).min()
    }

    /// Where a read for the next delivery starts: the first available record, else the end of
    /// the window if it has room. `None`: nothing can be delivered now.
    pub fn next_to_read(&self, settings: &ShareSettings) -> Option<i64> {
        let available = self.records.iter().find(|(_, r)| r.state == RecordState::Available).map(|(o, _)| *o);
        available.or_else(|| self.has_room(settings).then_some(self.end))
    }

    fn has_room(&self, settings: &ShareSettings) -> bool {
        usize::try_from(self.end - self.start).unwrap_or(usize::MAX) < settings.max_locks
    }

    /// Hands `member` up to `max_records` records among `from..=covered` (what a read
    /// returned), none at or past `bound` (the high watermark, or the last stable offset for
    /// read_committed), locked until `now + lock_duration`. Offsets `skip` names (control
    /// records, records of aborted transactions under read_committed) are archived instead:
    /// nobody is to receive them.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(&mut self, member: &str, from: i64, covered: i64, bound: i64, max_records: usize, now: Instant, settings: &ShareSettings, skip: &dyn Fn(i64) -> bool) -> Vec<Acquired> {
        let owner: Arc<str> = Arc::from(member);
        let until = now + settings.lock_duration;
        let last = covered.min(bound - 1);
        let mut out: Vec<Acquired> = Vec::new();
        let mut count = 0usize;
        let from = from.max(self.start);
        if from > last {
            return out;
        }
        let take = |offset: i64, r: &mut InFlight, out: &mut Vec<Acquired>| {
            r.state = RecordState::Acquired;
            r.deliveries = r.deliveries.saturating_add(1);
            r.owner = Some((owner.clone(), until));
            match out.last_mut() {
                Some(a) if a.last + 1 == offset && a.deliveries == r.deliveries => a.last = offset,
                _ => out.push(Acquired { first: offset, last: offset, deliveries: r.deliveries }),
            }
        };
        let mut skipped = false;
        for (&offset, r) in self.records.range_mut(from..=last) {
            if count >= max_records {
                break;
            }
            if r.state == RecordState::Available {
                if skip(offset) {
                    set(r, RecordState::Archived);
                    skipped = true;
                } else {
                    take(offset, r, &mut out);
                    count += 1;
                }
            }
        }
        while count < max_records && self.end <= last && self.end >= from && self.has_room(settings) {
            let offset = self.end;
            let mut r = InFlight { state: RecordState::Available, deliveries: 0, owner: None };
            if skip(offset) {
                r.state = RecordState::Archived;
                skipped = true;
            } else {
                take(offset, &mut r, &mut out);
                count += 1;
            }
            self.records.insert(offset, r);
            self.end += 1;
        }
        if skipped {
            self.advance();
        }
        out
    }

    /// Applies `member`'s acknowledgements, all or nothing.
    pub fn acknowledge(&mut self, member: &str, batches: &[AckBatch], now: Instant, settings: &ShareSettings) -> Result<(), AckError> {
        for b in batches {
            let len = b.last.checked_sub(b.first).and_then(|d| usize::try_from(d).ok()).map(|d| d + 1).ok_or(AckError::InvalidRequest)?;
            if b.types.is_empty() || (b.types.len() != 1 && b.types.len() != len) {
                return Err(AckError::InvalidRequest);
            }
            if len > settings.max_locks.max(1) {
                return Err(AckError::InvalidRecordState);
            }
            for offset in b.first..=b.last {
                let held = self.records.get(&offset).is_some_and(|r| r.state == RecordState::Acquired && r.owner.as_ref().is_some_and(|(m, _)| &**m == member));
                if !held {
                    return Err(AckError::InvalidRecordState);
                }
            }
        }
        for b in batches {
            for (i, offset) in (b.first..=b.last).enumerate() {
                let ack = if b.types.len() == 1 { b.types[0] } else { b.types[i] };
                let Some(r) = self.records.get_mut(&offset) else { continue };
                match ack {
                    Ack::Accept => set(r, RecordState::Acknowledged),
                    Ack::Gap | Ack::Reject => set(r, RecordState::Archived),
                    Ack::Release => release(r, settings),
                    Ack::Renew => {
                        if let Some((_, until)) = r.owner.as_mut() {
                            *until = now + settings.lock_duration;
                        }
                    }
                }
            }
        }
        self.advance();
        Ok(())
    }

    /// Gives back everything `member` holds (its share session closed). Returns whether
    /// anything changed.
    pub fn release_member(&mut self, member: &str, settings: &ShareSettings) -> bool {
        let mut changed = false;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired && r.owner.as_ref().is_some_and(|(m, _)| &**m == member) {
                release(r, settings);
                changed = true;
            }
        }
        if changed {
            self.advance();
        }
        changed
    }

    /// Moves `start` past the done records at the front of the window.
    fn advance(&mut self) {
        while let Some(entry) = self.records.first_entry() {
            if !entry.get().done() {
                break;
            }
            entry.remove();
            self.start += 1;
        }
        if self.records.is_empty() {
            self.start = self.start.max(self.end);
            self.end = self.start;
        } else if let Some((&first, _)) = self.records.first_key_value() {
            self.start = first;
        }
    }
}

fn set(r: &mut InFlight, state: RecordState) {
    r.state = state;
    r.owner = None;
}

fn release(r: &mut InFlight, settings: &ShareSettings) {
    let state = if r.deliveries >= settings.delivery_limit { RecordState::Archived } else { RecordState::Available };
    set(r, state);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
