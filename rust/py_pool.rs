//! Python bindings of the worker pool: converts Python work items to pool
//! jobs and runs the worker loop on a Python thread. The pool logic itself
//! is in `pool.rs`; this file only moves values across the boundary.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyModule, PyString, PyTuple};

use crate::pool::{spin_until, Pool, Refused, Take};

/// One submitted call: the future it completes and what to call.
struct Job {
    future: Py<PyAny>,
    func: Py<PyAny>,
    args: Py<PyTuple>,
    kwargs: Option<Py<PyDict>>,
    /// For calls submitted with queue notices: an object with `wait(position)`
    /// and `start()` methods (see `taut.executor._Tracker`).
    tracker: Option<Py<PyAny>>,
}

static NEXT_POOL_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// The id of the pool whose worker loop runs on this thread (0: none).
    static CURRENT_POOL: Cell<usize> = const { Cell::new(0) };
}

/// How long a blocked submitter waits before it looks for signals (Ctrl-C).
const SIGNAL_SLICE: Duration = Duration::from_millis(50);

/// The state a worker thread shares with the executor, so the executor can
/// tell which worker runs which call (to abandon or interrupt it).
#[pyclass(frozen, module = "taut._core")]
pub struct WorkerSlot {
    thread_id: AtomicU64,
    /// Sequence number of the call running on this worker (0: none).
    current: AtomicU64,
    abandoned: AtomicBool,
    interrupted: AtomicBool,
}

#[pymethods]
impl WorkerSlot {
    #[new]
    fn new() -> Self {
        WorkerSlot {
            thread_id: AtomicU64::new(0),
            current: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
        }
    }

    /// The `threading.get_ident()` of the worker thread (0 before it runs).
    #[getter]
    fn thread_id(&self) -> u64 {
        self.thread_id.load(Ordering::Acquire)
    }

    /// The sequence number of the running call, 0 when idle.
    #[getter]
    fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    #[getter]
    fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }
}

/// The Rust side of one `taut.ThreadPoolExecutor`.
#[pyclass(frozen, module = "taut._core")]
pub struct PoolCore {
    pool: Arc<Pool<Job>>,
    idle_timeout: Option<Duration>,
    id: usize,
    /// seq -> tracker of tracked calls still waiting in the queue. Only
    /// touched with the GIL held, so Python's dict is all the locking needed.
    waiting: Py<PyDict>,
    /// Set in a forked child: the pool's lock may be held by a thread that
    /// does not exist there, so nothing may touch the pool any more.
    orphaned: AtomicBool,
    names: Names,
}

/// The attribute names and state strings the worker loop uses, interned
/// once per pool while the GIL is held. Not `intern!`: its lazy cell is
/// filled with the GIL released for a moment, and a `fork()` from another
/// thread in that moment leaves the cell locked for good in the child,
/// where the next worker to touch it (holding `taut.executor._state_lock`)
/// would wait forever, and every caller with it.
struct Names {
    wait: Py<PyString>,
    result: Py<PyString>,
    exception: Py<PyString>,
    state_lock: Py<PyString>,
    acquire: Py<PyString>,
    release: Py<PyString>,
    cond: Py<PyString>,
    state: Py<PyString>,
    pending: Py<PyString>,
    running: Py<PyString>,
    cancelled: Py<PyString>,
    cancelled_and_notified: Py<PyString>,
    set_running_or_notify_cancel: Py<PyString>,
    done_callbacks: Py<PyString>,
    finished: Py<PyString>,
    set_result: Py<PyString>,
    set_exception: Py<PyString>,
    seq: Py<PyString>,
    start: Py<PyString>,
    /// `taut.executor`, for its `_state_lock` (looked up on each use: a
    /// forked child replaces the lock).
    executor: Py<PyModule>,
}

impl Names {
    fn new(py: Python<'_>) -> PyResult<Self> {
        Ok(Names {
            wait: PyString::intern(py, "wait").unbind(),
            result: PyString::intern(py, "_result").unbind(),
            exception: PyString::intern(py, "_exception").unbind(),
            state_lock: PyString::intern(py, "_state_lock").unbind(),
            acquire: PyString::intern(py, "acquire").unbind(),
            release: PyString::intern(py, "release").unbind(),
            cond: PyString::intern(py, "_cond").unbind(),
            state: PyString::intern(py, "_state").unbind(),
            pending: PyString::intern(py, "PENDING").unbind(),
            running: PyString::intern(py, "RUNNING").unbind(),
            cancelled: PyString::intern(py, "CANCELLED").unbind(),
            cancelled_and_notified: PyString::intern(py, "CANCELLED_AND_NOTIFIED").unbind(),
            set_running_or_notify_cancel: PyString::intern(py, "set_running_or_notify_cancel")
                .unbind(),
            done_callbacks: PyString::intern(py, "_done_callbacks").unbind(),
            finished: PyString::intern(py, "FINISHED").unbind(),
            set_result: PyString::intern(py, "set_result").unbind(),
            set_exception: PyString::intern(py, "set_exception").unbind(),
            seq: PyString::intern(py, "_seq").unbind(),
            start: PyString::intern(py, "start").unbind(),
            executor: py.import("taut.executor")?.unbind(),
        })
    }
}

fn seconds(name: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(v) if v.is_nan() || v <= 0.0 => Err(PyValueError::new_err(format!(
            "{name} must be a positive number of seconds or None, got {v}"
        ))),
        // Anything too large for a Duration is as good as forever.
        Some(v) => Ok(Duration::try_from_secs_f64(v).ok()),
    }
}

impl PoolCore {
    fn notify_positions(&self, py: Python<'_>, updates: &[(u64, usize)]) {
        let names = &self.names;
        let waiting = self.waiting.bind(py);
        for (seq, position) in updates {
            if let Ok(Some(tracker)) = waiting.get_item(seq) {
                if let Err(err) = tracker.call_method1(names.wait.bind(py), (*position,)) {
                    err.write_unraisable(py, Some(&tracker));
                }
            }
        }
    }

    fn run_job(&self, py: Python<'_>, job: &Job, slot: &WorkerSlot, seq: u64) -> bool {
        let names = &self.names;
        let future = job.future.bind(py);
        slot.current.store(seq, Ordering::Release);
        let outcome = job
            .func
            .bind(py)
            .call(job.args.bind(py), job.kwargs.as_ref().map(|k| k.bind(py)));
        slot.current.store(0, Ordering::Release);
        if slot.interrupted.swap(false, Ordering::AcqRel) {
            // An interrupt aimed at this call may still be pending if the call
            // ended before reaching a bytecode boundary: it must not land in
            // the next call or in the worker loop.
            unsafe {
                ffi::PyThreadState_SetAsyncExc(
                    slot.thread_id.load(Ordering::Acquire) as _,
                    std::ptr::null_mut(),
                );
            }
        }
        let (ok, result) = match outcome {
            Ok(value) => (true, finish(names, future, true, value)),
            Err(err) => {
                let exc = err.into_value(py).into_bound(py).into_any();
                (false, finish(names, future, false, exc))
            }
        };
        if let Err(err) = result {
            // Setting the outcome only fails when something else completed
            // the future first (InvalidStateError); report, keep serving.
            err.write_unraisable(py, Some(future));
        }
        ok
    }
}

// Cheap state changes of a `taut.executor.Future` nobody waits on.
// The Python fast paths of that class change the state under the module's
// `_state_lock` (a plain lock, never held across Python code that could wait
// for this thread); we take the same lock without blocking, with the GIL
// held. Waiters and callback registrations either create the Condition or
// register under that lock and then look at the state again, so a future
// without a Condition and without callbacks has nobody to notify. Anything
// else (lock busy, a Condition, callbacks, an unexpected state) takes the
// Python methods, which notify under the Condition. This saves two Python
// calls per task.

/// Runs `change` while holding `taut.executor._state_lock`, if it is free.
/// The lock is looked up each time: a forked child replaces it.
fn with_state_lock<'py, T>(
    py: Python<'py>,
    names: &Names,
    change: impl FnOnce() -> PyResult<Option<T>>,
) -> PyResult<Option<T>> {
    let lock = names.executor.bind(py).getattr(names.state_lock.bind(py))?;
    if !lock
        .call_method1(names.acquire.bind(py), (false,))?
        .is_truthy()?
    {
        return Ok(None);
    }
    let result = change();
    lock.call_method0(names.release.bind(py))?;
    result
}

/// `set_running_or_notify_cancel`: whether the call may run.
fn start(names: &Names, future: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = future.py();
    let fast = with_state_lock(py, names, || {
        if !future.getattr(names.cond.bind(py))?.is_none() {
            return Ok(None);
        }
        let state = future.getattr(names.state.bind(py))?;
        if state.is(names.pending.bind(py)) {
            future.setattr(names.state.bind(py), names.running.bind(py))?;
            return Ok(Some(true));
        }
        if state.is(names.cancelled.bind(py)) {
            future.setattr(names.state.bind(py), names.cancelled_and_notified.bind(py))?;
            return Ok(Some(false));
        }
        Ok(None)
    })?;
    match fast {
        Some(runnable) => Ok(runnable),
        None => future
            .call_method0(names.set_running_or_notify_cancel.bind(py))?
            .is_truthy(),
    }
}

/// `set_result(value)` when `ok`, else `set_exception(value)`.
fn finish<'py>(
    names: &Names,
    future: &Bound<'py, PyAny>,
    ok: bool,
    value: Bound<'py, PyAny>,
) -> PyResult<()> {
    let py = future.py();
    let (field, method) = if ok {
        (names.result.bind(py), names.set_result.bind(py))
    } else {
        (names.exception.bind(py), names.set_exception.bind(py))
    };
    let done = with_state_lock(py, names, || {
        let quiet = future.getattr(names.cond.bind(py))?.is_none()
            && future
                .getattr(names.state.bind(py))?
                .is(names.running.bind(py))
            && future.getattr(names.done_callbacks.bind(py))?.len()? == 0;
        if !quiet {
            return Ok(None);
        }
        future.setattr(field, &value)?;
        future.setattr(names.state.bind(py), names.finished.bind(py))?;
        Ok(Some(()))
    })?;
    if done.is_some() {
        return Ok(());
    }
    future.call_method1(method, (value,)).map(drop)
}

#[pymethods]
impl PoolCore {
    #[new]
    #[pyo3(signature = (max_workers, max_queue=0, idle_timeout=None))]
    fn new(
        py: Python<'_>,
        max_workers: usize,
        max_queue: usize,
        idle_timeout: Option<f64>,
    ) -> PyResult<Self> {
        if max_workers == 0 {
            return Err(PyValueError::new_err("max_workers must be greater than 0"));
        }
        Ok(PoolCore {
            pool: Arc::new(Pool::new(max_workers, max_queue)),
            idle_timeout: seconds("idle_timeout", idle_timeout)?,
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            waiting: PyDict::new(py).unbind(),
            orphaned: AtomicBool::new(false),
            names: Names::new(py)?,
        })
    }

    /// Queue a call. Sets `future._seq` and returns `(seq, spawn,
    /// waiting_at)`; `seq` is 0 when the pool is shut down, -1 when the
    /// bounded queue is full.
    #[pyo3(signature = (future, func, args, kwargs=None, tracker=None))]
    fn submit(
        &self,
        py: Python<'_>,
        future: Py<PyAny>,
        func: Py<PyAny>,
        args: Py<PyTuple>,
        kwargs: Option<Py<PyDict>>,
        tracker: Option<Py<PyAny>>,
    ) -> PyResult<(i64, bool, Option<usize>)> {
        let kwargs = kwargs.filter(|k| !k.bind(py).is_empty());
        let tracker_for_queue = tracker.as_ref().map(|t| t.clone_ref(py));
        let fut = future.clone_ref(py);
        let job = Job {
            future,
            func,
            args,
            kwargs,
            tracker,
        };
        let tracked = tracker_for_queue.is_some();
        match self.pool.submit(job, tracked) {
            Ok(s) => {
                // No worker can run this call before we return: running it
                // needs the GIL, which this thread holds throughout.
                fut.bind(py).setattr(self.names.seq.bind(py), s.seq)?;
                if let (Some(tracker), Some(_)) = (tracker_for_queue, s.waiting_at) {
                    self.waiting.bind(py).set_item(s.seq, tracker)?;
                }
                Ok((s.seq as i64, s.spawn, s.waiting_at))
            }
            Err(Refused::Shutdown(_)) => Ok((0, false, None)),
            Err(Refused::Full(_)) => Ok((-1, false, None)),
        }
    }

    /// Wait (GIL released, in slices that look for signals) until the
    /// bounded queue may have room or the pool shut down, at most `timeout`
    /// seconds (None: as long as it takes).
    #[pyo3(signature = (timeout=None))]
    fn wait_for_room(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let limit = seconds("timeout", timeout)?;
        let start = std::time::Instant::now();
        loop {
            let slice = match limit {
                None => SIGNAL_SLICE,
                Some(limit) => {
                    let left = limit.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return Ok(());
                    }
                    left.min(SIGNAL_SLICE)
                }
            };
            let pool = Arc::clone(&self.pool);
            if py.detach(move || pool.wait_for_room(slice)) {
                return Ok(());
            }
            py.check_signals()?;
        }
    }

    /// The worker loop; runs on a `threading.Thread` until the worker must
    /// exit. Trackers of queued calls hear of position changes, and a
    /// tracked call's `start()` runs just before it; both are called with
    /// no Rust lock held.
    fn run_worker(&self, py: Python<'_>, slot: &Bound<'_, WorkerSlot>) -> PyResult<()> {
        let slot = slot.get();
        let ident = py
            .import("threading")?
            .call_method0("get_ident")?
            .extract::<u64>()?;
        slot.thread_id.store(ident, Ordering::Release);
        CURRENT_POOL.with(|c| c.set(self.id));
        let idle = self.idle_timeout;
        let pool = Arc::clone(&self.pool);
        let mut take = py.detach(|| pool.first_take(idle));
        loop {
            match take {
                Take::Exit => break,
                Take::Empty => {
                    let pool = Arc::clone(&self.pool);
                    take = py.detach(move || pool.park(idle));
                }
                Take::Job {
                    seq, job, updates, ..
                } => {
                    if !updates.is_empty() {
                        self.notify_positions(py, &updates);
                    }
                    let future = job.future.bind(py);
                    let runnable = start(&self.names, future);
                    match runnable {
                        Ok(true) => {}
                        Ok(false) => {
                            self.pool.skipped_cancelled();
                            take = self.pool.try_take();
                            continue;
                        }
                        Err(err) => {
                            // Only a stray asynchronous exception gets here;
                            // the call must still end in an outcome.
                            let value = err.value(py).clone();
                            err.write_unraisable(py, Some(future));
                            if let Err(err) = future.call_method1("set_exception", (value,)) {
                                err.write_unraisable(py, Some(future));
                            }
                            self.pool.skipped_cancelled();
                            take = self.pool.try_take();
                            continue;
                        }
                    }
                    if let Some(tracker) = &job.tracker {
                        let _ = self.waiting.bind(py).del_item(seq);
                        if let Err(err) = tracker.bind(py).call_method0(self.names.start.bind(py)) {
                            err.write_unraisable(py, Some(tracker.bind(py)));
                        }
                    }
                    let ok = self.run_job(py, &job, slot, seq);
                    drop(job);
                    if slot.abandoned.load(Ordering::Acquire) {
                        // Replaced while it ran: leave without taking more work.
                        self.pool.done_abandoned(ok);
                        break;
                    }
                    take = self.pool.done_and_try_take(ok);
                }
            }
        }
        CURRENT_POOL.with(|c| c.set(0));
        Ok(())
    }

    /// A worker thread that will never run the loop gives back its place.
    fn worker_gone(&self) {
        self.pool.worker_gone();
    }

    /// Remove a queued call whose future was cancelled, and tell the calls
    /// behind it their new positions. False if a worker already took it.
    fn remove(&self, py: Python<'_>, seq: u64) -> bool {
        if self.orphaned.load(Ordering::Acquire) {
            return false;
        }
        // The removed job's references are dropped here, with the GIL held.
        let Some((_job, updates)) = self.pool.remove(seq) else {
            return false;
        };
        let _ = self.waiting.bind(py).del_item(seq);
        self.notify_positions(py, &updates);
        true
    }

    /// Give up on the worker running call `seq`: it leaves the ceiling (a
    /// replacement may start: the return value says whether the caller must
    /// start a thread) and exits after the call. False if `seq` is not running there.
    fn abandon(&self, slot: &Bound<'_, WorkerSlot>, seq: u64) -> (bool, bool) {
        let slot = slot.get();
        if seq == 0 || slot.current.load(Ordering::Acquire) != seq {
            return (false, false);
        }
        if slot.abandoned.swap(true, Ordering::AcqRel) {
            return (true, false);
        }
        (true, self.pool.abandon_worker())
    }

    /// Raise `exc_type` in the worker thread running call `seq`, at its next
    /// bytecode boundary. Checked and sent with the GIL held, so the call
    /// cannot end in between. False if `seq` is not running there.
    fn interrupt(
        &self,
        slot: &Bound<'_, WorkerSlot>,
        seq: u64,
        exc_type: &Bound<'_, PyAny>,
    ) -> bool {
        let slot = slot.get();
        if seq == 0 || slot.current.load(Ordering::Acquire) != seq {
            return false;
        }
        slot.interrupted.store(true, Ordering::Release);
        let tid = slot.thread_id.load(Ordering::Acquire);
        // SAFETY: called with the GIL held, on a live exception type.
        unsafe { ffi::PyThreadState_SetAsyncExc(tid as _, exc_type.as_ptr()) == 1 }
    }

    /// Change the ceiling; returns how many worker threads to start.
    fn resize(&self, max_workers: usize) -> PyResult<usize> {
        if max_workers == 0 {
            return Err(PyValueError::new_err("max_workers must be greater than 0"));
        }
        Ok(self.pool.resize(max_workers))
    }

    fn shutdown(&self) {
        self.pool.shutdown();
    }

    /// Take every queued call out; returns their futures in queue order.
    /// `waiting_only`: leave the calls a worker is already on its way to
    /// (see `Pool::drain_waiting`).
    #[pyo3(signature = (waiting_only=false))]
    fn drain(&self, py: Python<'_>, waiting_only: bool) -> Vec<Py<PyAny>> {
        let jobs = if waiting_only {
            self.pool.drain_waiting()
        } else {
            self.pool.drain()
        };
        let _attached = py;
        jobs.into_iter().map(|job| job.future).collect()
    }

    /// Release the GIL and spin (at most `micros` µs) until a worker comes
    /// back for more work — having released the GIL, so that taking it
    /// back is immediate. A waiter calls this before parking: for a short
    /// call it saves the wake-up of a parked thread on both sides.
    fn spin_for_release(&self, py: Python<'_>, micros: u64) {
        let before = self.pool.released();
        let pool = Arc::clone(&self.pool);
        py.detach(move || spin_until(Duration::from_micros(micros), || pool.released() != before));
    }

    /// In a forked child: take the parent's queued calls out without
    /// blocking (a thread that does not exist in the child may hold the
    /// lock); their futures in queue order, None if the lock was held.
    fn drain_after_fork(&self, py: Python<'_>) -> Option<Vec<Py<PyAny>>> {
        self.waiting.bind(py).clear();
        let jobs = self.pool.try_drain()?;
        Some(jobs.into_iter().map(|job| job.future).collect())
    }

    /// The 1-based position of queued call `seq`, None once it started.
    fn position(&self, seq: u64) -> Option<usize> {
        if self.orphaned.load(Ordering::Acquire) {
            return None;
        }
        self.pool.position(seq)
    }

    /// In a forked child, after `drain_after_fork`: the parent's pool is
    /// never touched again (its lock may be frozen), so `remove` and
    /// `position` on the futures it leaves behind answer without locking.
    fn orphan(&self) {
        self.orphaned.store(true, Ordering::Release);
    }

    /// True when called on a worker thread of this pool.
    fn in_worker(&self) -> bool {
        CURRENT_POOL.with(|c| c.get()) == self.id
    }

    /// `(max_workers, workers, idle, running, queued, completed, failed,
    /// cancelled, abandoned)`.
    fn stats(&self) -> (usize, usize, usize, usize, usize, u64, u64, u64, u64) {
        let s = self.pool.stats();
        (
            s.max_workers,
            s.workers,
            s.idle,
            s.running,
            s.queued,
            s.completed,
            s.failed,
            s.cancelled,
            s.abandoned,
        )
    }
}
