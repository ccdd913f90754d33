//! Retry delays after failed reconciles: exponential per object, with jitter, capped, and
//! forgotten on the object's next success. A fixed delay would hammer an API server that is
//! failing for everyone at once, and retry a broken object as often as a flaky one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The first retry's delay (before jitter).
pub const BASE: Duration = Duration::from_secs(1);
/// No retry waits longer than this.
pub const CAP: Duration = Duration::from_secs(300);

/// The delay before retry number `failures` (1 for the first failure). `jitter` in `[0, 1)`
/// picks a point in the upper half of the exponential step ("equal jitter"): replicas of a
/// failure spread out, yet no retry comes sooner than half its step.
pub fn delay(failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    let step = BASE.saturating_mul(1 << exp).min(CAP);
    step.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// Failure counts per object (`namespace/name`).
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Counts a failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: &str) -> Duration {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = failures.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        delay(*n, random_fraction())
    }

    /// Forgets `key`'s failures: its next failure starts from [`BASE`] again.
    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }

    /// How many times in a row `key` has failed.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

/// A uniformly random number in `[0, 1)` (from the v4 UUID generator the crate already uses).
fn random_fraction() -> f64 {
    (uuid::Uuid::new_v4().as_u128() >> 75) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_with_jitter_and_are_capped() {
        assert_eq!(delay(1, 0.0), Duration::from_millis(500));
        assert_eq!(
            delay(1, 0.999_999),
            Duration::from_secs(1).mul_f64(0.999_999_5)
        );
        assert_eq!(delay(4, 0.0), Duration::from_secs(4));
        assert_eq!(delay(10, 1.0), CAP);
        assert_eq!(delay(u32::MAX, 0.0), CAP / 2);
    }

    #[test]
    fn counts_are_per_object_and_reset_on_success() {
        let b = Backoff::default();
        for _ in 0..3 {
            b.failed("ns/a");
        }
        assert!(b.failed("ns/a") >= Duration::from_secs(4));
        assert!(b.failed("ns/b") <= BASE);
        b.succeeded("ns/a");
        assert_eq!(b.failures("ns/a"), 0);
        assert!(b.failed("ns/a") <= BASE);
        assert!(
            (0..100)
                .map(|_| random_fraction())
                .all(|f| (0.0..1.0).contains(&f))
        );
    }
}
