//! Platform-safe timeout arithmetic: the ceiling every timeout is clamped to
//! and saturating conversions, so that no value however large, odd or derived
//! (`timeout + grace`) can overflow an OS wait, a `time_t` or a Rust
//! `Instant + Duration` (which panics on overflow).
//!
//! No PyO3 here; the Python gate `taut.clamp_timeout` lives in `py_clamp.rs`.

use std::time::{Duration, Instant};

/// The largest timeout taut passes on, in seconds: 1,000,000 s (11.6 days).
///
/// Why this value, and not `threading.TIMEOUT_MAX` (9.2e9 s on Linux):
/// - `select.poll().poll()`, `select.epoll.poll()` and `selectors` take an
///   `int` of milliseconds: anything above `INT_MAX` ms (2,147,483 s, 24.8
///   days) raises `OverflowError`. That is the tightest limit among the waits
///   Python code commonly reaches, so the ceiling sits well below it and
///   leaves 1.1 million seconds (13 days) of room for grace periods and
///   derived values such as `timeout + 5` or `timeout + 3600`.
/// - Windows `threading` waits are `DWORD` milliseconds: `TIMEOUT_MAX` is
///   4,294,967 s there; still more than 4x the ceiling.
/// - A 32-bit `time_t` overflows in January 2038; "now + 1e6 s" stays
///   representable until 12 days before that, while `10**18` would not.
/// - `Instant + Duration` and `asyncio`'s `loop.time() + delay` are exact
///   and far from any limit at this size.
///
/// A deadline 11.6 days away is "never" for every request-scoped bound taut
/// serves; callers who mean "no deadline" pass `None` or `math.inf`.
pub const MAX_TIMEOUT_SECS: f64 = 1_000_000.0;

/// Why a float is not a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClampError {
    NaN,
}

/// Normalise seconds: `+inf` is no deadline (`None`); zero, negative and
/// `-inf` mean already expired (`0.0`); the rest is capped at
/// [`MAX_TIMEOUT_SECS`]. NaN is an error: it silently compares false with
/// everything and would disable a deadline.
pub fn clamp_secs(secs: f64) -> Result<Option<f64>, ClampError> {
    if secs.is_nan() {
        return Err(ClampError::NaN);
    }
    if secs == f64::INFINITY {
        return Ok(None);
    }
    if secs <= 0.0 {
        return Ok(Some(0.0));
    }
    Ok(Some(secs.min(MAX_TIMEOUT_SECS)))
}

/// A `Duration` for any float: NaN and negatives are zero, overflow saturates.
/// (`Duration::from_secs_f64` panics on all three.)
pub fn duration_from_secs(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

/// `base + d`, or the latest `Instant` this platform can represent near that
/// if the sum overflows (`Instant + Duration` panics instead).
pub fn saturating_add(base: Instant, d: Duration) -> Instant {
    if let Some(t) = base.checked_add(d) {
        return t;
    }
    // Find (nearly) the largest addable duration by halving: at most ~64 steps,
    // and only ever taken for absurd inputs.
    let mut step = d;
    let mut at = base;
    while step > Duration::from_nanos(1) {
        step /= 2;
        if let Some(t) = at.checked_add(step) {
            at = t;
        }
    }
    at
}

/// `base - d`, saturating at the earliest representable `Instant`.
pub fn saturating_sub(base: Instant, d: Duration) -> Instant {
    if let Some(t) = base.checked_sub(d) {
        return t;
    }
    let mut step = d;
    let mut at = base;
    while step > Duration::from_nanos(1) {
        step /= 2;
        if let Some(t) = at.checked_sub(step) {
            at = t;
        }
    }
    at
}

/// The `Instant` `secs` seconds from now, for any float (saturating).
pub fn deadline_after(secs: f64) -> Instant {
    saturating_add(Instant::now(), duration_from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamp_edges() {
        assert_eq!(clamp_secs(f64::NAN), Err(ClampError::NaN));
        assert_eq!(clamp_secs(f64::INFINITY), Ok(None));
        assert_eq!(clamp_secs(f64::NEG_INFINITY), Ok(Some(0.0)));
        assert_eq!(clamp_secs(-5.0), Ok(Some(0.0)));
        assert_eq!(clamp_secs(-0.0), Ok(Some(0.0)));
        assert_eq!(clamp_secs(0.25), Ok(Some(0.25)));
        assert_eq!(clamp_secs(1e18), Ok(Some(MAX_TIMEOUT_SECS)));
        assert_eq!(clamp_secs(f64::MAX), Ok(Some(MAX_TIMEOUT_SECS)));
    }

    #[test]
    fn ceiling_leaves_room_for_grace_in_poll_milliseconds() {
        // poll()/epoll take an int of milliseconds.
        let int_max_secs = i32::MAX as f64 / 1000.0;
        assert!(MAX_TIMEOUT_SECS + 3600.0 * 24.0 * 7.0 < int_max_secs);
    }

    #[test]
    fn durations_saturate() {
        assert_eq!(duration_from_secs(f64::NAN), Duration::ZERO);
        assert_eq!(duration_from_secs(-1.0), Duration::ZERO);
        assert_eq!(duration_from_secs(f64::INFINITY), Duration::MAX);
        assert_eq!(duration_from_secs(1e300), Duration::MAX);
        assert_eq!(duration_from_secs(1.5), Duration::from_millis(1500));
    }

    #[test]
    fn instants_never_panic() {
        let now = Instant::now();
        let far = saturating_add(now, Duration::MAX);
        assert!(far > now);
        // Adding more to the saturated value stays put instead of panicking.
        assert!(saturating_add(far, Duration::from_secs(5)) >= far);
        let early = saturating_sub(now, Duration::MAX);
        assert!(early <= now);
        assert!(deadline_after(f64::INFINITY) > now);
        assert!(deadline_after(f64::NAN) >= now);
        // Saturated means at the limit, not merely somewhere past `now`: not a
        // microsecond more fits in either direction.
        assert!(far.checked_add(Duration::from_micros(1)).is_none());
        assert!(early.checked_sub(Duration::from_micros(1)).is_none());
        assert!(now.duration_since(early) > Duration::from_secs(3600 * 24 * 365));
        assert!(saturating_sub(early, Duration::from_secs(5)) <= early);
        let plus = saturating_add(now, duration_from_secs(MAX_TIMEOUT_SECS + 3600.0));
        assert_eq!(
            plus.duration_since(now),
            Duration::from_secs(MAX_TIMEOUT_SECS as u64 + 3600)
        );
    }
}
