//! A mutex for the state a shard's take-over holds while it replays the shard's log (the log's
//! own state, the groups, the transactions).
//!
//! Test builds also count the lockers that found it held, so a test can hold a take-over open
//! until a request is known to wait on it ([`crate::shard_owner::request_during_take_over`])
//! rather than sleeping and hoping the request got that far.

use parking_lot::{Mutex, MutexGuard};
#[cfg(any(test, feature = "testing"))]
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug)]
pub(crate) struct CountedMutex<T> {
    state: Mutex<T>,
    #[cfg(any(test, feature = "testing"))]
    waited: AtomicUsize,
}

impl<T> CountedMutex<T> {
    pub(crate) fn new(state: T) -> CountedMutex<T> {
        CountedMutex {
            state: Mutex::new(state),
            #[cfg(any(test, feature = "testing"))]
            waited: AtomicUsize::new(0),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(any(test, feature = "testing"))]
        if let Some(held) = self.state.try_lock() {
            return held;
        } else {
            self.waited.fetch_add(1, Ordering::SeqCst);
        }
        self.state.lock()
    }

    /// How many lockers have found the state held, since it was made.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn waited(&self) -> usize {
        self.waited.load(Ordering::SeqCst)
    }
}

impl<T: Default> Default for CountedMutex<T> {
    fn default() -> CountedMutex<T> {
        CountedMutex::new(T::default())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_locker_that_finds_the_state_held_is_counted_and_gets_it_when_released() {
        let mutex = CountedMutex::new(0);
        let mut held = mutex.lock();
        assert_eq!(mutex.waited(), 0, "an uncontended lock is not a wait");
        std::thread::scope(|s| {
            let waiter = s.spawn(|| *mutex.lock());
            while mutex.waited() == 0 {
                std::thread::yield_now();
            }
            *held = 7;
            drop(held);
            assert_eq!(waiter.join().unwrap(), 7);
        });
        assert_eq!(mutex.waited(), 1);
    }
}
