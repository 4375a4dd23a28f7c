//! Platform-safe timeout arithmetic: the ceiling every timeout is clamped to
//! and saturating conversions, so that no value however large, odd or derived
//! (`timeout + grace`) can overflow an OS wait, a `time_t` or a Rust
//! `Instant + Duration` (which panics on overflow).
//!
//! No PyO3 here; the Python gate `taut.clamp_timeout` lives in `py_clamp.rs`.

use std::time::{Duration, Instant};

/// The longest deadline taut keeps, in seconds: 2**32 s (136.1 years).
///
/// Every finite timeout up to this value is honoured exactly: the timer
/// thread keeps it as nanoseconds of the monotonic clock (`u64`, good for
/// 584 years of uptime), and only the OS waits in front of it are cut into
/// [`OS_WAIT_SLICE`] pieces. A finite value beyond it (`10**400`,
/// `timedelta.max`) is clamped to it: a deadline 136 years away, which no
/// process outlives. Why this value:
/// - at least 100 years (3.16e9 s), as promised to callers who compute
///   "effectively never" from calendars;
/// - under half of what Python's own time conversions take (`time.sleep`,
///   `threading`, `select`, socket timeouts use int64 nanoseconds: 9.2e9 s),
///   so `MAX_TIMEOUT + grace` for any grace under a century still converts;
/// - exact in an `f64`, and `time.monotonic() + MAX_TIMEOUT` keeps
///   microsecond resolution.
pub const MAX_TIMEOUT_SECS: f64 = 4_294_967_296.0;

/// The longest single OS wait taut makes: 1,000,000 s (11.6 days). Longer
/// waits are made in pieces of at most this size, re-checking the clock in
/// between, because the platform's waits take much less than
/// [`MAX_TIMEOUT_SECS`]: `poll`/`epoll`/`selectors` an `int` of milliseconds
/// (24.8 days), Windows waits a `DWORD` of milliseconds (49.7 days; Rust's
/// std then waits forever instead), a 32-bit `time_t` "now + timeout".
pub const OS_WAIT_SLICE_SECS: f64 = 1_000_000.0;

/// [`OS_WAIT_SLICE_SECS`] as a `Duration`.
pub const OS_WAIT_SLICE: Duration = Duration::from_secs(1_000_000);

/// One piece of a wait for `left`: what a single condvar/park/OS wait may be
/// given. The caller re-checks its own deadline after waking, so a long
/// deadline is kept exactly (waking once every 11.6 days costs nothing).
pub fn os_wait(left: Duration) -> Duration {
    left.min(OS_WAIT_SLICE)
}

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
        // 100 years (of 365.25 days) and 30 days are kept exactly.
        assert_eq!(clamp_secs(3_155_760_000.0), Ok(Some(3_155_760_000.0)));
        assert_eq!(clamp_secs(2_592_000.0), Ok(Some(2_592_000.0)));
        assert_eq!(clamp_secs(f64::MAX), Ok(Some(MAX_TIMEOUT_SECS)));
    }

    #[test]
    #[allow(clippy::assertions_on_constants)] // the constants are the subject
    fn ceiling_is_at_least_a_century_and_converts_in_python() {
        assert!(MAX_TIMEOUT_SECS >= 100.0 * 365.25 * 86400.0);
        // Python's time conversions use int64 nanoseconds: room for a century of grace.
        let py_time_max_secs = i64::MAX as f64 / 1e9;
        assert!(MAX_TIMEOUT_SECS + 100.0 * 365.25 * 86400.0 < py_time_max_secs);
        // The timer's u64 nanoseconds hold it with centuries of uptime to spare.
        assert!((MAX_TIMEOUT_SECS * 2.0) * 1e9 < u64::MAX as f64);
    }

    #[test]
    fn one_os_wait_fits_poll_milliseconds_and_windows_dwords() {
        // poll()/epoll take an int of milliseconds, Windows a DWORD.
        let int_max_secs = i32::MAX as f64 / 1000.0;
        assert!(OS_WAIT_SLICE_SECS + 3600.0 * 24.0 * 7.0 < int_max_secs);
        assert_eq!(OS_WAIT_SLICE.as_secs_f64(), OS_WAIT_SLICE_SECS);
        assert_eq!(os_wait(Duration::MAX), OS_WAIT_SLICE);
        assert_eq!(os_wait(Duration::from_secs(5)), Duration::from_secs(5));
        let century = duration_from_secs(MAX_TIMEOUT_SECS);
        assert_eq!(os_wait(century), OS_WAIT_SLICE);
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
