//! `FutureStateLock`: the re-entrant lock that `taut.Future`'s lock-free
//! state changes are made under (`taut._future._state_lock`).
//!
//! A `threading.RLock` did this job, but a worker takes the lock for every
//! call it finishes and starts, and through an RLock that is two Python
//! method calls (argument parsing, a semaphore post): a fifth of a worker's
//! own time per call. That time is spent holding the GIL, and with many
//! workers (64 threads sleeping 1 ms each, say) every microsecond one holds
//! it is paid again by the threads queuing for it. Here the worker takes and
//! lets go of the lock with an atomic operation each (`StateLock` in
//! `py_future_state`); Python code takes it with `with`, as it took the RLock.
//!
//! Nobody holding the lock ever waits for anything: the holder is either
//! Rust code that holds the GIL throughout, or a few lines of Python. So a
//! thread that finds it held by another waits with the GIL released (the
//! holder may need the GIL to finish), in short slices: between them the
//! main thread runs pending signal handlers, so a Ctrl-C interrupts that
//! wait as it did the RLock's. Re-entrant like the RLock: a signal handler
//! runs in the main thread between any two bytecodes, also while that
//! thread holds the lock, and may take it again (a graceful shutdown
//! cancelling pending calls, say).

use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::gil;
use crate::state_lock::ReentrantLock;

/// How long a waiting thread waits before it looks for pending signals.
const WAIT_SLICE: Duration = Duration::from_millis(20);

#[pyclass(frozen, module = "taut._core")]
pub struct FutureStateLock {
    lock: ReentrantLock,
}

impl FutureStateLock {
    /// Take it if it is free or this thread holds it already (no waiting).
    pub(crate) fn try_enter(&self) -> bool {
        self.lock.try_enter()
    }

    /// Let go once; the caller holds it.
    pub(crate) fn exit(&self) {
        self.lock.exit();
    }
}

#[pymethods]
impl FutureStateLock {
    #[new]
    fn new() -> Self {
        FutureStateLock {
            lock: ReentrantLock::new(),
        }
    }

    /// As `threading.RLock.acquire`: true once taken; false if `blocking`
    /// is false and another thread holds it, or after `timeout` seconds
    /// (-1: no limit).
    #[pyo3(signature = (blocking = true, timeout = -1.0), text_signature = "($self, blocking=True, timeout=-1.0)")]
    fn acquire(&self, py: Python<'_>, blocking: bool, timeout: f64) -> PyResult<bool> {
        if timeout != -1.0 && (timeout.is_nan() || timeout < 0.0) {
            return Err(PyValueError::new_err(format!(
                "timeout must be a non-negative number of seconds or -1 (no limit), got {timeout}"
            )));
        }
        if !blocking && timeout != -1.0 {
            return Err(PyValueError::new_err(format!(
                "timeout cannot be given with blocking=False, got timeout={timeout}"
            )));
        }
        if self.lock.try_enter() {
            return Ok(true);
        }
        if !blocking {
            return Ok(false);
        }
        // An end too far off for the clock (or infinite) is no end at all.
        let until = (timeout != -1.0)
            .then(|| Duration::try_from_secs_f64(timeout).ok())
            .flatten()
            .and_then(|t| Instant::now().checked_add(t));
        loop {
            let slice_end = Instant::now() + WAIT_SLICE;
            let end = until.map_or(slice_end, |until| until.min(slice_end));
            let lock = &self.lock;
            if gil::detach(py, move || lock.wait_until(end)) {
                return Ok(true);
            }
            // Between slices, with the GIL: a Ctrl-C ends the wait.
            py.check_signals()?;
            if until.is_some_and(|until| Instant::now() >= until) {
                return Ok(false);
            }
        }
    }

    /// As `threading.RLock.release`: RuntimeError unless this thread holds it.
    fn release(&self) -> PyResult<()> {
        if !self.lock.is_owned() {
            return Err(PyRuntimeError::new_err("cannot release un-acquired lock"));
        }
        self.lock.exit();
        Ok(())
    }

    fn __enter__(&self, py: Python<'_>) -> PyResult<bool> {
        self.acquire(py, true, -1.0)
    }

    fn __exit__(
        &self,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.release()
    }

    /// True if this thread holds it (as `threading.RLock._is_owned`).
    fn _is_owned(&self) -> bool {
        self.lock.is_owned()
    }

    /// True if any thread holds it.
    fn locked(&self) -> bool {
        self.lock.is_locked()
    }

    fn __repr__(&self) -> String {
        let state = if self.lock.is_locked() {
            "locked"
        } else {
            "unlocked"
        };
        format!("<taut._core.FutureStateLock {state}>")
    }
}
