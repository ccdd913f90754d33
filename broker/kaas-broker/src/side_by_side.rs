//! Independent volume work, a few items at a time. Each item (a partition's take-over, a
//! topic's open at start) is a short sequence of file operations whose cost on a network volume
//! is mostly waiting for the server; thousands of them one after another add those waits up,
//! while the volume serves many at once.

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// `work` applied to every item, at most `threads` at a time; the results in the items' order.
pub(crate) fn map<T: Sync, R: Send>(items: &[T], threads: usize, work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let (Some(item), Some(slot)) = (items.get(i), results.get(i)) else { break };
                    *slot.lock() = Some(work(item));
                }
            });
        }
    });
    // NB: every slot is filled: a worker that panicked re-raises its panic when the scope ends.
    results.into_iter().filter_map(Mutex::into_inner).collect()
}

#[cfg(test)]
mod tests {
    use super::map;

    #[test]
    fn every_item_once_in_order_whatever_the_thread_count() {
        let items: Vec<u32> = (0..100).collect();
        for threads in [0, 1, 3, 8, 200] {
            let calls = std::sync::atomic::AtomicUsize::new(0);
            let out = map(&items, threads, |n| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                n * 2
            });
            assert_eq!(out, items.iter().map(|n| n * 2).collect::<Vec<_>>(), "{threads} threads");
            assert_eq!(calls.into_inner(), items.len(), "{threads} threads");
        }
        assert!(map(&[] as &[u32], 8, |n| *n).is_empty());
    }
}
