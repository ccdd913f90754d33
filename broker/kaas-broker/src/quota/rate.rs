//! A quota sensor: a rate measured over sampled windows, and the throttle time that brings an
//! over-quota client back to its bound — Kafka's `Rate` over a `SampledStat` and
//! `QuotaUtils.throttleTime`, with its defaults (`quota.window.num` 11 samples of
//! `quota.window.size.seconds` 1 s).

use std::time::Duration;

use tokio::time::Instant;

/// Samples kept (`quota.window.num`).
pub const SAMPLES: u32 = 11;
/// One sample's span (`quota.window.size.seconds`).
pub const WINDOW: Duration = Duration::from_secs(1);
/// The longest a client is throttled for one request: the whole measured span. A larger
/// excess is throttled again on the next request, while the window still holds it.
pub const MAX_THROTTLE: Duration = Duration::from_secs(SAMPLES as u64);

#[derive(Debug, Clone, Copy)]
struct Sample {
    start: Instant,
    total: f64,
}

/// The rate of what a sensor records, per second.
#[derive(Debug, Clone)]
pub struct Rate {
    samples: [Sample; SAMPLES as usize],
    current: usize,
    /// When something was last recorded: idle sensors are dropped.
    pub last_recorded: Instant,
}

impl Rate {
    pub fn new(now: Instant) -> Rate {
        Rate { samples: [Sample { start: now, total: 0.0 }; SAMPLES as usize], current: 0, last_recorded: now }
    }

    /// Adds `value` at `now`, in the current sample or a new one once the current is a window old.
    pub fn record(&mut self, value: f64, now: Instant) {
        if now.saturating_duration_since(self.samples[self.current].start) >= WINDOW {
            self.current = (self.current + 1) % self.samples.len();
            self.samples[self.current] = Sample { start: now, total: 0.0 };
        }
        self.samples[self.current].total += value;
        self.last_recorded = now;
    }

    /// Adds `value` at `now` and answers how long its sender must now wait to be back at
    /// `bound` (a quota's [`throttle`]).
    pub fn record_throttle(&mut self, value: f64, bound: f64, now: Instant) -> Duration {
        self.record(value, now);
        let (measured, span) = self.measure(now);
        throttle(measured, bound, span)
    }

    /// The rate per second at `now`, and the span it was measured over: from the oldest live
    /// sample, but at least `SAMPLES - 1` windows, so a new sensor's first burst is not
    /// divided by a few milliseconds.
    pub fn measure(&mut self, now: Instant) -> (f64, Duration) {
        let span = WINDOW * SAMPLES;
        for sample in &mut self.samples {
            if now.saturating_duration_since(sample.start) >= span {
                *sample = Sample { start: now, total: 0.0 };
            }
        }
        let total: f64 = self.samples.iter().map(|s| s.total).sum();
        let oldest = self.samples.iter().map(|s| s.start).min().unwrap_or(now);
        let mut elapsed = now.saturating_duration_since(oldest);
        let full_windows = (elapsed.as_nanos() / WINDOW.as_nanos()) as u32;
        if full_windows < SAMPLES - 1 {
            elapsed += WINDOW * (SAMPLES - 1 - full_windows);
        }
        (total / elapsed.as_secs_f64(), elapsed)
    }
}

/// How long a client measured at `rate` over `span` must wait to be back at `bound`:
/// `(rate − bound) / bound × span`, nothing when within it, at most [`MAX_THROTTLE`].
pub fn throttle(rate: f64, bound: f64, span: Duration) -> Duration {
    if rate <= bound || bound <= 0.0 {
        return Duration::ZERO;
    }
    let seconds = (rate - bound) / bound * span.as_secs_f64();
    Duration::try_from_secs_f64(seconds).unwrap_or(MAX_THROTTLE).min(MAX_THROTTLE)
}

/// The most a client may take in one request before it is certainly over its quota: the
/// bound over the span a rate is measured on (Kafka's `getMaxValueInQuotaWindow`).
pub fn max_in_window(bound: f64) -> f64 {
    bound * (WINDOW * (SAMPLES - 1)).as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_measured_over_at_least_ten_windows() {
        let t0 = Instant::now();
        let mut rate = Rate::new(t0);
        rate.record(10_000.0, t0);
        let (r, span) = rate.measure(t0 + Duration::from_millis(500));
        assert_eq!(span, Duration::from_millis(10_500));
        assert!((r - 10_000.0 / 10.5).abs() < 1e-6, "{r}");
    }

    #[test]
    fn samples_older_than_the_span_no_longer_count() {
        let t0 = Instant::now();
        let mut rate = Rate::new(t0);
        rate.record(1_000_000.0, t0);
        for s in 1..=12 {
            rate.record(100.0, t0 + WINDOW * s);
        }
        let (r, _) = rate.measure(t0 + WINDOW * 12 + Duration::from_millis(1));
        assert!(r < 200.0, "the first sample's million bytes still count: {r}");
    }

    #[test]
    fn the_throttle_is_the_excess_over_the_bound_times_the_span() {
        let t0 = Instant::now();
        let mut rate = Rate::new(t0);
        for s in 0..10 {
            rate.record(1_500.0, t0 + WINDOW * s);
        }
        let (r, span) = rate.measure(t0 + WINDOW * 10);
        assert_eq!((r, span), (1_500.0, Duration::from_secs(10)));
        // Half again the bound over 10 s: 5 s more without traffic make it the bound over 15 s.
        assert_eq!(throttle(r, 1_000.0, span), Duration::from_secs(5));
        assert_eq!(throttle(500.0, 1_000.0, span), Duration::ZERO);
        assert_eq!(throttle(1e12, 1.0, span), MAX_THROTTLE);
    }
}
