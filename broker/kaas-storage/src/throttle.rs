//! The log cleaner's I/O budget (Kafka's `log.cleaner.io.max.bytes.per.second`): the bytes all
//! cleaner threads of a broker read and write together stay under a rate on average, so that
//! cleaning a large log does not starve producers and consumers of the volume's bandwidth.
//!
//! A token bucket holding at most one second of the rate. A thread takes its bytes as it moves
//! them, going into debt if it must, and then sleeps (outside the bucket's lock) until its debt
//! would be repaid; a second thread taking meanwhile adds to the debt, so it waits longer: the
//! rate bounds the threads together. Sleeps are cut in steps that check the caller's stop flag,
//! so a broker shutting down never waits for the budget.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Time as the throttle sees it: real for the broker, scripted for tests.
pub trait ThrottleClock: Send + Sync {
    /// Time since some fixed start.
    fn now(&self) -> Duration;
    fn sleep(&self, d: Duration);
}

struct RealClock(Instant);

impl ThrottleClock for RealClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// The longest single sleep, between checks of the stop flag.
const STEP: Duration = Duration::from_millis(100);

/// A shared budget of bytes per second (see the module docs).
pub struct IoThrottle {
    /// Bytes per second; `None` is no limit.
    rate: Option<f64>,
    clock: Box<dyn ThrottleClock>,
    /// (tokens, when they were counted); tokens go negative while threads are in debt.
    bucket: Mutex<(f64, Duration)>,
}

impl std::fmt::Debug for IoThrottle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoThrottle").field("rate", &self.rate).finish_non_exhaustive()
    }
}

impl IoThrottle {
    /// No limit: `take` returns at once.
    pub fn unlimited() -> IoThrottle {
        IoThrottle::with_clock(f64::INFINITY, Box::new(RealClock(Instant::now())))
    }

    /// At most `bytes_per_second` on average; not finite or not positive means no limit
    /// (Kafka's default is `Double.MAX_VALUE`).
    pub fn new(bytes_per_second: f64) -> IoThrottle {
        IoThrottle::with_clock(bytes_per_second, Box::new(RealClock(Instant::now())))
    }

    /// [`IoThrottle::new`] on another clock.
    pub fn with_clock(bytes_per_second: f64, clock: Box<dyn ThrottleClock>) -> IoThrottle {
        let rate = (bytes_per_second.is_finite() && bytes_per_second > 0.0 && bytes_per_second < f64::MAX)
            .then_some(bytes_per_second);
        let start = clock.now();
        IoThrottle { rate, clock, bucket: Mutex::new((rate.unwrap_or(0.0), start)) }
    }

    /// Accounts for `bytes` the cleaner moved, then sleeps until the budget allows them (or
    /// `stop` says to give up).
    pub fn take(&self, bytes: u64, stop: &dyn Fn() -> bool) {
        let Some(rate) = self.rate else { return };
        let debt = {
            let mut bucket = self.bucket.lock();
            let now = self.clock.now();
            let earned = now.saturating_sub(bucket.1).as_secs_f64() * rate;
            bucket.0 = (bucket.0 + earned).min(rate) - bytes as f64;
            bucket.1 = now;
            -bucket.0
        };
        if debt <= 0.0 {
            return;
        }
        let until = self.clock.now() + Duration::from_secs_f64(debt / rate);
        loop {
            let now = self.clock.now();
            if now >= until || stop() {
                return;
            }
            self.clock.sleep((until - now).min(STEP));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A clock that only moves when slept on, recording the total slept.
    #[derive(Default, Clone)]
    struct Scripted(Arc<Mutex<Duration>>);

    impl ThrottleClock for Scripted {
        fn now(&self) -> Duration {
            *self.0.lock()
        }

        fn sleep(&self, d: Duration) {
            *self.0.lock() += d;
        }
    }

    #[test]
    fn the_rate_bounds_the_bytes_after_a_second_of_burst() {
        let clock = Scripted::default();
        let throttle = IoThrottle::with_clock(1000.0, Box::new(clock.clone()));
        // One second's worth goes at once; every further 1000 bytes costs a second.
        throttle.take(1000, &|| false);
        assert_eq!(clock.now(), Duration::ZERO);
        for _ in 0..3 {
            throttle.take(1000, &|| false);
        }
        assert!((clock.now().as_secs_f64() - 3.0).abs() < 1e-6, "{:?}", clock.now());
        // Idle time refills the bucket, up to one second's worth.
        clock.sleep(Duration::from_secs(10));
        let before = clock.now();
        throttle.take(1000, &|| false);
        assert_eq!(clock.now(), before);
        throttle.take(500, &|| false);
        assert!(((clock.now() - before).as_secs_f64() - 0.5).abs() < 1e-6, "{:?}", clock.now() - before);
    }

    #[test]
    fn a_stop_ends_the_wait_and_no_limit_never_waits() {
        let clock = Scripted::default();
        let throttle = IoThrottle::with_clock(10.0, Box::new(clock.clone()));
        throttle.take(1_000_000, &|| clock.now() >= Duration::from_millis(300));
        assert_eq!(clock.now(), Duration::from_millis(300), "stopped at the first check past 300 ms");

        for rate in [f64::INFINITY, f64::MAX, 0.0, -1.0, f64::NAN] {
            let clock = Scripted::default();
            IoThrottle::with_clock(rate, Box::new(clock.clone())).take(u64::MAX, &|| false);
            assert_eq!(clock.now(), Duration::ZERO, "rate {rate}");
        }
    }
}
