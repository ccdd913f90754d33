//! A token bucket: at most `per_minute` events a minute, in bursts of up to that many.
//!
//! Used where one client request can make the broker create lasting state for free (a Metadata
//! request naming N unknown topics auto-creates N topics, in a cluster N KafkaTopic objects).

use parking_lot::Mutex;
use tokio::time::Instant;

#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl RateLimiter {
    /// A full bucket of `per_minute` tokens. Zero allows nothing.
    pub fn per_minute(per_minute: u32) -> RateLimiter {
        RateLimiter { per_minute, state: Mutex::new(Bucket { tokens: f64::from(per_minute), refilled: Instant::now() }) }
    }

    /// Takes one token if there is one.
    pub fn try_acquire(&self) -> bool {
        let mut bucket = self.state.lock();
        let now = Instant::now();
        let capacity = f64::from(self.per_minute);
        let earned = now.duration_since(bucket.refilled).as_secs_f64() * capacity / 60.0;
        bucket.tokens = (bucket.tokens + earned).min(capacity);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_burst_up_to_the_rate_then_one_token_per_interval() {
        let limiter = RateLimiter::per_minute(3);
        assert!((0..3).all(|_| limiter.try_acquire()));
        assert!(!limiter.try_acquire(), "a fourth event within the minute");
        tokio::time::advance(Duration::from_secs(19)).await;
        assert!(!limiter.try_acquire(), "a token needs 20 s at 3 a minute");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(limiter.try_acquire());
        assert!(!limiter.try_acquire());
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!((0..10).filter(|_| limiter.try_acquire()).count(), 3, "the bucket holds at most a minute's worth");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_allows_nothing() {
        let limiter = RateLimiter::per_minute(0);
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(!limiter.try_acquire());
    }
}
