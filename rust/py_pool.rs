//! Python bindings of the worker pool: converts Python work items to pool
//! jobs and back. The pool logic itself is in `pool.rs`.
//!
//! The worker loop is Python (`taut._worker._work`): it asks a
//! [`WorkerSlot`] for the next step, runs the call itself, and reports the
//! outcome. Every method here returns before any user code runs and never
//! runs Python code itself (no callbacks, no `set_result` with callbacks, no
//! dropping of the last reference to a user object): when Python code must
//! run, the step says so and the Python loop does it. So no Python frame
//! ever has a Rust frame below it on a worker thread, and a worker that an
//! exiting interpreter ends with `pthread_exit` unwinds through C and Python
//! frames only (see `gil.rs` for the GIL-free waits).

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyModule, PySet, PyString, PyTuple};

use crate::async_exc;
use crate::gil;
use crate::pool::{spin_until, Pool, Refused, Take};
use crate::py_future_state::{
    finish_quietly, finish_waited_quietly, release_gates, start_quietly, StateLock,
};
use crate::py_loop::LoopChannel;
use crate::py_timer::{call_on_callback_thread, ensure_callback_thread};

/// Where a call's outcome goes.
enum Target {
    /// A `taut.Future` (a `concurrent.futures.Future`).
    Future(Py<PyAny>),
    /// An asyncio future, settled on its loop through the loop's channel.
    Loop {
        channel: Py<LoopChannel>,
        waiter: Py<PyAny>,
    },
}

impl Target {
    fn clone_ref(&self, py: Python<'_>) -> Target {
        match self {
            Target::Future(future) => Target::Future(future.clone_ref(py)),
            Target::Loop { channel, waiter } => Target::Loop {
                channel: channel.clone_ref(py),
                waiter: waiter.clone_ref(py),
            },
        }
    }
}

/// One submitted call: where its outcome goes and what to call.
struct Job {
    target: Target,
    func: Py<PyAny>,
    args: Py<PyTuple>,
    kwargs: Option<Py<PyDict>>,
    /// For calls submitted with queue notices: an object with `wait(position)`
    /// and `start()` methods (see `taut._notices._Tracker`).
    tracker: Option<Py<PyAny>>,
}

/// `(unclaimed, waiting_at, seq, owed)`: see `Pool::submit_waking`.
type EnqueueResult = PyResult<(usize, Option<usize>, u64, bool)>;

impl Job {
    fn new(
        py: Python<'_>,
        target: Target,
        func: Py<PyAny>,
        args: Py<PyTuple>,
        kwargs: Option<Py<PyDict>>,
        tracker: Option<Py<PyAny>>,
    ) -> Job {
        // No keyword dict when there are none: the call takes CPython's
        // fastest path.
        let kwargs = kwargs.filter(|k| !k.bind(py).is_empty());
        Job {
            target,
            func,
            args,
            kwargs,
            tracker,
        }
    }

    /// `(future, fn, args, kwargs)` for Python, which then owns them all;
    /// `kwargs` is None when there are none (a call without a keyword dict
    /// takes CPython's fastest path).
    fn into_call(self, py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
        let kwargs = match self.kwargs {
            Some(k) => k.into_bound(py).into_any(),
            None => py.None().into_bound(py),
        };
        let object = match self.target {
            Target::Future(future) => future,
            Target::Loop { waiter, .. } => waiter,
        };
        PyTuple::new(
            py,
            [
                object.into_bound(py),
                self.func.into_bound(py),
                self.args.into_bound(py).into_any(),
                kwargs,
            ],
        )
    }
}

static NEXT_POOL_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// The id of the pool whose worker loop runs on this thread (0: none).
    static CURRENT_POOL: Cell<usize> = const { Cell::new(0) };
}

/// How long a blocked submitter waits before it looks for signals (Ctrl-C).
const SIGNAL_SLICE: Duration = Duration::from_millis(50);

/// The kinds of slow steps (see `taut._worker._work`): a list whose first
/// item is one of these.
const STEP_START: u8 = 0;
const STEP_FINISH: u8 = 1;
const STEP_SKIP: u8 = 2;

/// An asyncio submitter waiting for room in a bounded queue.
struct RoomWaiter {
    id: u64,
    /// The waiter's loop channel; None for a loop without one (no
    /// `add_reader`: Windows' proactor loop).
    channel: Option<Py<LoopChannel>>,
    /// Pushed onto the waiter's loop channel when there may be room; without
    /// a channel, called on taut's callback thread instead (which hands it
    /// to the loop with `call_soon_threadsafe`).
    callback: Py<PyAny>,
}

/// What one executor's Rust side and its workers share.
struct Shared {
    pool: Pool<Job>,
    idle_timeout: Option<Duration>,
    id: usize,
    /// seq -> tracker of tracked calls still waiting in the queue. Only
    /// touched with the GIL held, so Python's dict is all the locking needed.
    waiting: Py<PyDict>,
    /// Set in a forked child: the pool's lock may be held by a thread that
    /// does not exist there, so nothing may touch the pool any more.
    orphaned: AtomicBool,
    names: Names,
    /// FIFO of asyncio submitters waiting for room (see `wait_for_room_async`).
    room_waiters: Mutex<VecDeque<RoomWaiter>>,
    room_waiting: AtomicUsize,
    next_room_waiter: AtomicU64,
    /// Room waiters told to try again that have not come back yet (retried
    /// with `turn`, or passed the turn on): newcomers must not take the room
    /// meant for them (see `submit_async`'s `line`). A waiter whose loop
    /// stopped before it could come back holds its turn until taut hears
    /// that the loop closed (its turn then passes on: `pass_room_on` from
    /// `LoopWaker._loop_closed`), or until a coroutine waiting in line on a
    /// running loop finds the turn stale (`tell_past_stale_turns`).
    /// Newcomers meanwhile go through the line (told at once when there is
    /// room: one loop pass more).
    room_turns: AtomicUsize,
    /// When the last room waiter was told (`room_told_at_nanos` after
    /// `room_clock`): how long the turns out have had to come back.
    room_clock: Instant,
    room_told_at_nanos: AtomicU64,
}

impl Shared {
    /// Tell the first asyncio submitter waiting for room (if any, and if
    /// there is room now) to try again, on its loop. `all`: tell every one
    /// (shutdown). (Not "as many as there is room for besides the turns
    /// out": a turn whose waiter never comes back would then hold its room
    /// for good.)
    fn wake_room_waiters(&self, py: Python<'_>, all: bool) {
        if self.room_waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        loop {
            if !all && self.pool.is_full() {
                return;
            }
            let waiter = {
                let mut waiters = self.room_waiters.lock().unwrap_or_else(|e| e.into_inner());
                let waiter = waiters.pop_front();
                self.room_waiting.store(waiters.len(), Ordering::Release);
                waiter
            };
            let Some(waiter) = waiter else { return };
            self.room_turns.fetch_add(1, Ordering::AcqRel);
            self.room_told_at_nanos
                .store(self.room_nanos_now(), Ordering::Release);
            let told = match &waiter.channel {
                Some(channel) => channel.get().push(py, (waiter.callback, None, py.None())),
                None => call_on_callback_thread(waiter.callback),
            };
            if !told {
                // Its loop closed while it waited, and taut has let go of
                // that loop's channel: it will never come back for its turn,
                // so the next waiter in line gets it (else that one would
                // wait for good, with the queue empty).
                self.end_turn();
                continue;
            }
            if !all {
                return;
            }
        }
    }

    /// Nanoseconds since `room_clock`, saturating (u64 nanoseconds last
    /// 584 years).
    fn room_nanos_now(&self) -> u64 {
        u64::try_from(self.room_clock.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// A told room waiter came back (or gave up): its turn is over.
    fn end_turn(&self) {
        let _ = self
            .room_turns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Asyncio submitters wait for room, or were told there is some and
    /// have not come back yet: a newcomer goes behind them.
    fn has_line(&self) -> bool {
        self.room_waiting.load(Ordering::Acquire) > 0 || self.room_turns.load(Ordering::Acquire) > 0
    }

    fn queue_full(&self, py: Python<'_>) -> PyErr {
        match self.names.queue_full.bind(py).call1((format!(
            "the queue is full: max_queue={} calls waiting",
            self.pool.max_queue()
        ),))
        {
            Ok(error) => PyErr::from_value(error),
            Err(error) => error,
        }
    }
}

/// The attribute names and state strings the fast paths use, interned
/// once per pool while the GIL is held. Not `intern!`: its lazy cell is
/// filled with the GIL released for a moment, and a `fork()` from another
/// thread in that moment leaves the cell locked for good in the child.
pub(crate) struct Names {
    pub(crate) result: Py<PyString>,
    pub(crate) exception: Py<PyString>,
    pub(crate) state_lock: Py<PyString>,
    pub(crate) acquire: Py<PyString>,
    pub(crate) release: Py<PyString>,
    pub(crate) cond: Py<PyString>,
    pub(crate) cond_lock: Py<PyString>,
    /// `taut._future_condition.FutureCondition`, the usual `_cond`.
    pub(crate) future_condition: Py<PyAny>,
    pub(crate) state: Py<PyString>,
    pub(crate) pending: Py<PyString>,
    pub(crate) running: Py<PyString>,
    pub(crate) finished: Py<PyString>,
    /// A future's done callbacks: None until one is added.
    pub(crate) callbacks: Py<PyString>,
    /// The gates of threads parked in a future's result(): None if none.
    pub(crate) result_gates: Py<PyString>,
    pub(crate) seq: Py<PyString>,
    pub(crate) cancelled_state: Py<PyString>,
    pub(crate) set_running_or_notify_cancel: Py<PyString>,
    /// `taut._future`, for its `_state_lock` (looked up on each use: a
    /// forked child replaces the lock).
    pub(crate) future_module: Py<PyModule>,
    pub(crate) queue_full: Py<PyAny>,
    /// What `finish_waited_quietly` reads: a future's waiters, the
    /// standard library's two waiter classes it can tell without their
    /// methods, their fields, and the threads in a `FutureCondition`'s
    /// `wait()` (`taut._future_condition._sleepers_of`).
    pub(crate) waiter_list: Py<PyString>,
    pub(crate) all_completed_waiter: Py<PyAny>,
    pub(crate) as_completed_waiter: Py<PyAny>,
    pub(crate) lock: Py<PyString>,
    pub(crate) num_pending_calls: Py<PyString>,
    pub(crate) stop_on_exception: Py<PyString>,
    pub(crate) finished_futures: Py<PyString>,
    pub(crate) event: Py<PyString>,
    pub(crate) flag: Py<PyString>,
    pub(crate) sleepers_of: Py<PyAny>,
}

impl Names {
    fn new(py: Python<'_>) -> PyResult<Self> {
        let executor = py.import("taut.executor")?;
        let future_module = py.import("taut._future")?;
        let future_condition = py.import("taut._future_condition")?;
        let waiters = py.import("concurrent.futures._base")?;
        Ok(Names {
            result: PyString::intern(py, "_result").unbind(),
            exception: PyString::intern(py, "_exception").unbind(),
            state_lock: PyString::intern(py, "_state_lock").unbind(),
            acquire: PyString::intern(py, "acquire").unbind(),
            release: PyString::intern(py, "release").unbind(),
            cond: PyString::intern(py, "_cond").unbind(),
            cond_lock: PyString::intern(py, "_lock").unbind(),
            future_condition: future_condition.getattr("FutureCondition")?.unbind(),
            state: PyString::intern(py, "_state").unbind(),
            pending: PyString::intern(py, "PENDING").unbind(),
            running: PyString::intern(py, "RUNNING").unbind(),
            finished: PyString::intern(py, "FINISHED").unbind(),
            callbacks: PyString::intern(py, "_callbacks").unbind(),
            result_gates: PyString::intern(py, "_result_gates").unbind(),
            seq: PyString::intern(py, "_seq").unbind(),
            cancelled_state: PyString::intern(py, "CANCELLED").unbind(),
            set_running_or_notify_cancel: PyString::intern(py, "set_running_or_notify_cancel")
                .unbind(),
            queue_full: executor.getattr("QueueFull")?.unbind(),
            future_module: future_module.unbind(),
            waiter_list: PyString::intern(py, "_waiter_list").unbind(),
            all_completed_waiter: private_class(&waiters, "_AllCompletedWaiter"),
            as_completed_waiter: private_class(&waiters, "_AsCompletedWaiter"),
            lock: PyString::intern(py, "lock").unbind(),
            num_pending_calls: PyString::intern(py, "num_pending_calls").unbind(),
            stop_on_exception: PyString::intern(py, "stop_on_exception").unbind(),
            finished_futures: PyString::intern(py, "finished_futures").unbind(),
            event: PyString::intern(py, "event").unbind(),
            flag: PyString::intern(py, "_flag").unbind(),
            sleepers_of: future_condition.getattr("_sleepers_of")?.unbind(),
        })
    }
}

/// A private class of the standard library, or None if this Python has no
/// such class (then nothing is ever of its type, and the path that relies on
/// it is never taken).
fn private_class(module: &Bound<'_, PyModule>, name: &str) -> Py<PyAny> {
    module
        .getattr(name)
        .map(Bound::unbind)
        .unwrap_or_else(|_| module.py().None())
}

/// `[(tracker, position), ...]` for the tracked calls among `updates`.
fn notices<'py>(
    waiting: &Bound<'py, PyDict>,
    updates: &[(u64, usize)],
) -> PyResult<Bound<'py, PyList>> {
    let notices = PyList::empty(waiting.py());
    for (queued_seq, position) in updates {
        if let Some(tracker) = waiting.get_item(queued_seq)? {
            notices.append((tracker, *position))?;
        }
    }
    Ok(notices)
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

/// One worker thread's handle on its pool: the Python worker loop calls
/// these methods, and the executor uses it to find, abandon or interrupt
/// the call a worker runs.
///
/// Each method returns the worker's next *step*: `None` (exit the loop),
/// `False` (nothing to do: drop references, then `park()`), a tuple
/// `(future, fn, args, kwargs)` (already RUNNING: call it, then `ok(value)`
/// or `fail(exc)`), or a list for the slow paths, `[0, notices, future, fn,
/// args, kwargs, tracker]` (deliver the position notices, start the future
/// with its own method, then run it or `skip()`) and `[1, future, ok,
/// value]` (complete the future with its own method, then `done(ok)`).
#[pyclass(frozen, module = "taut._core")]
pub struct WorkerSlot {
    shared: Arc<Shared>,
    thread_id: AtomicU64,
    /// Sequence number of the call this worker runs (0: none).
    current: AtomicU64,
    /// Where that call's outcome goes. Python holds a reference to the
    /// object too for as long as this one lives, so dropping this one never
    /// frees a user object here.
    current_target: Mutex<Option<Target>>,
    /// When the call started (`Pool::now_ns`), for the service-time average.
    started_ns: AtomicU64,
    abandoned: AtomicBool,
    interrupted: AtomicBool,
    /// True from `PoolCore.claim` until the worker thread reports in
    /// (`take`) or the place is given back (`give_back`, or dropping a slot
    /// no thread reported in for). Whichever comes first wins, so a thread
    /// is never counted twice, nor a place lost for good.
    start_pending: AtomicBool,
}

impl Drop for WorkerSlot {
    fn drop(&mut self) {
        // The thread meant to report in with this slot never did, and now
        // never can: an interrupt cut its start short (before or inside
        // `Thread.start`) where Python could not give the place back. In a
        // forked child the pool is never touched (see `orphaned`).
        if !self.shared.orphaned.load(Ordering::Acquire) {
            self.give_back_place();
        }
    }
}

impl WorkerSlot {
    fn give_back_place(&self) -> bool {
        let pending = self.start_pending.swap(false, Ordering::AcqRel);
        if pending {
            self.shared.pool.worker_gone();
        }
        pending
    }

    fn take_current(&self) -> Option<Target> {
        self.current_target
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The call ended: no interrupt may be aimed at it any more, and one
    /// already sent but not yet raised (the call ended before a bytecode
    /// boundary) must not land in the worker loop or the next call.
    /// Returns the time it ended (`Pool::now_ns`): the start of a call taken
    /// in the same step, read once (a clock read is a tenth of a worker's
    /// own time per call).
    fn end_call(&self, py: Python<'_>) -> u64 {
        self.current.store(0, Ordering::Release);
        let pool = &self.shared.pool;
        let started = self.started_ns.load(Ordering::Relaxed);
        let now = pool.now_ns();
        pool.record_service(now.saturating_sub(started));
        if self.interrupted.swap(false, Ordering::AcqRel) {
            // Called on the worker's own thread. Only a signal handler's
            // exception could land meanwhile, and those run on the main
            // thread only: shown as unraisable should it ever happen,
            // rather than lose the call's outcome.
            if let Err(err) = async_exc::take_back_own(py) {
                err.write_unraisable(py, None);
            }
        }
        now
    }

    /// The step that follows a finished call. `lock`: the state lock, if
    /// finishing the call took it (the next call may start under it).
    /// `ended`: when the call ended, if just now (see `end_call`).
    fn after(
        &self,
        py: Python<'_>,
        ok: bool,
        lock: &mut StateLock<'_>,
        ended: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        if self.shared.orphaned.load(Ordering::Acquire) {
            // A forked child, where this thread forked inside the call it
            // just finished: the parent's pool is never touched again (a
            // thread the child does not have may hold its lock, and no
            // worker will ever make work for it). Leave the loop, as a
            // plain thread that forked would when its function returns.
            return Ok(self.exit(py));
        }
        let pool = &self.shared.pool;
        if self.abandoned.load(Ordering::Acquire) {
            // Replaced while it ran: leave without taking more work.
            pool.done_abandoned(ok);
            return Ok(self.exit(py));
        }
        let take = pool.done_and_try_take(ok);
        self.step(py, take, lock, ended)
    }

    /// The call was cancelled before it started: on to the next step.
    fn skipped(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let ended = self.end_call(py);
        drop(self.take_current());
        self.shared.pool.skipped_cancelled();
        let take = self.shared.pool.try_take();
        let lock = &mut StateLock::new(py, &self.shared.names);
        self.step(py, take, lock, Some(ended))
    }

    fn exit(&self, py: Python<'_>) -> Py<PyAny> {
        CURRENT_POOL.with(|c| c.set(0));
        py.None()
    }

    /// Turn what the pool handed out into the step for the Python loop.
    /// `lock`: the state lock, which this step may already hold; it is let go
    /// before anything that allocates a Python object or lets go of the GIL.
    /// `now`: the time, if just read (see `end_call`).
    fn step(
        &self,
        py: Python<'_>,
        take: Take<Job>,
        lock: &mut StateLock<'_>,
        now: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let (seq, job, updates) = match take {
            Take::Exit => return Ok(self.exit(py)),
            Take::Empty => return Ok(false.into_pyobject(py)?.to_owned().into_any().unbind()),
            // Woken by work; now holding the GIL, take it if it is still there.
            Take::Woken => return self.step(py, self.shared.pool.claim_woken(), lock, now),
            Take::Job {
                seq, job, updates, ..
            } => (seq, job, updates),
        };
        let shared = &self.shared;
        let names = &shared.names;
        let previous = self
            .current_target
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(job.target.clone_ref(py));
        // Dropped after the lock is let go (it is None in practice): its
        // last reference could run a `__del__`, and Python code run while
        // the record is locked could let another thread fork with it
        // locked (see `running_future`).
        drop(previous);
        self.current.store(seq, Ordering::Release);
        let now = now.unwrap_or_else(|| shared.pool.now_ns());
        self.started_ns.store(now, Ordering::Relaxed);
        // The common case: a plain call of a future nobody waits on yet,
        // marked as started quietly (under the lock, maybe still held from
        // finishing the previous call).
        let plain = updates.is_empty() && job.tracker.is_none();
        let started = match &job.target {
            Target::Future(future) if plain => start_quietly(names, future.bind(py), lock)?,
            _ => false,
        };
        lock.let_go();
        let waiting = shared.waiting.bind(py);
        let notices = if updates.is_empty() {
            None
        } else {
            Some(notices(waiting, &updates)?)
        };
        if job.tracker.is_some() {
            // The job holds the tracker too: this is never the last reference.
            waiting.del_item(seq).ok();
        }
        // A job left the queue: an asyncio submitter may have room now.
        shared.wake_room_waiters(py, false);
        if started {
            return Ok(job.into_call(py)?.into_any().unbind());
        }
        // How else the call is marked as started: by the future's own method
        // in Python, or not at all (asyncio: a cancelled waiter means the
        // call must not run).
        let start: Option<Py<PyAny>> = match &job.target {
            Target::Future(future) => Some(
                future
                    .bind(py)
                    .getattr(names.set_running_or_notify_cancel.bind(py))?
                    .unbind(),
            ),
            Target::Loop { waiter, .. } => {
                let cancelled = waiter
                    .bind(py)
                    .getattr(names.state.bind(py))?
                    .eq(names.cancelled_state.bind(py))?;
                if cancelled {
                    // Hand the objects to Python to drop, then skip it.
                    let call = job.into_call(py)?;
                    let step = PyList::new(
                        py,
                        [STEP_SKIP.into_pyobject(py)?.into_any(), call.into_any()],
                    )?;
                    return Ok(step.into_any().unbind());
                }
                if notices.is_none() {
                    return Ok(job.into_call(py)?.into_any().unbind());
                }
                None
            }
        };
        let tracker = job
            .tracker
            .as_ref()
            .map_or_else(|| py.None(), |t| t.clone_ref(py));
        let call = job.into_call(py)?;
        let notices = match notices {
            Some(list) => list.into_any(),
            None => PyList::empty(py).into_any(),
        };
        let start = start.unwrap_or_else(|| py.None()).into_bound(py);
        let step = PyList::new(
            py,
            [
                STEP_START.into_pyobject(py)?.into_any(),
                notices,
                call.into_any(),
                tracker.into_bound(py),
                start,
            ],
        )?;
        Ok(step.into_any().unbind())
    }

    /// Deliver the outcome quietly and go on, or hand it to Python.
    /// `ended`: when the call ended (see `end_call`).
    fn complete(
        &self,
        py: Python<'_>,
        target: Target,
        ok: bool,
        value: Bound<'_, PyAny>,
        ended: u64,
    ) -> PyResult<Py<PyAny>> {
        let names = &self.shared.names;
        let mut lock = StateLock::new(py, names);
        let future = match target {
            Target::Loop { channel, waiter } => {
                // In a forked child the channel is the parent's loop's.
                if !self.shared.orphaned.load(Ordering::Acquire) {
                    channel.get().push(py, (waiter, Some(ok), value.unbind()));
                }
                return self.after(py, ok, &mut lock, Some(ended));
            }
            Target::Future(future) => future,
        };
        let future = future.bind(py);
        if let Some(gates) = finish_quietly(names, future, ok, &value, &mut lock)? {
            // On to the next call while holding the lock; the threads parked
            // in result() are woken once it is let go.
            let next = self.after(py, ok, &mut lock, Some(ended));
            lock.let_go();
            release_gates(names, &gates)?;
            return next;
        }
        // A wait() or as_completed() waits on it (it has a Condition).
        lock.let_go();
        if let Some(gates) = finish_waited_quietly(names, future, ok, &value, &mut lock)? {
            let next = self.after(py, ok, &mut lock, Some(ended));
            lock.let_go();
            release_gates(names, &gates)?;
            return next;
        }
        let step = PyList::new(
            py,
            [
                STEP_FINISH.into_pyobject(py)?.into_any(),
                future.clone(),
                ok.into_pyobject(py)?.to_owned().into_any(),
                value,
            ],
        )?;
        Ok(step.into_any().unbind())
    }
}

#[pymethods]
impl WorkerSlot {
    /// The worker's first step; blocks (GIL released) until there is work.
    /// None (exit) if its start was given back meanwhile: the place is
    /// someone else's to start, and this thread never counted.
    fn take(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if !self.start_pending.swap(false, Ordering::AcqRel) {
            return Ok(py.None());
        }
        let ident = unsafe { ffi::PyThread_get_thread_ident() } as u64;
        self.thread_id.store(ident, Ordering::Release);
        CURRENT_POOL.with(|c| c.set(self.shared.id));
        let shared = Arc::clone(&self.shared);
        let take = gil::detach(py, move || shared.pool.first_take(shared.idle_timeout));
        self.step(py, take, &mut StateLock::new(py, &self.shared.names), None)
    }

    /// The thread claimed for this slot will never report in (`take`): it
    /// was never made, or its initializer failed. Its place is free again,
    /// and the next submission starts a worker for the calls it was for.
    /// False (and nothing done) if the thread reported in already, or the
    /// place was given back before.
    fn give_back(&self) -> bool {
        self.give_back_place()
    }

    /// The thread claimed for this slot could not be made (`Thread.start`
    /// raised an error, not an interrupt): as `give_back`, and the starts
    /// still unclaimed are dropped too (see `Pool::start_failed`). False
    /// (and nothing done) as for `give_back`.
    fn start_failed(&self) -> bool {
        let pending = self.start_pending.swap(false, Ordering::AcqRel);
        if pending {
            self.shared.pool.start_failed();
        }
        pending
    }

    /// After a `False` step: wait (GIL released) for work.
    fn park(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let shared = Arc::clone(&self.shared);
        let take = gil::detach(py, move || shared.pool.park_then_claim(shared.idle_timeout));
        self.step(py, take, &mut StateLock::new(py, &self.shared.names), None)
    }

    /// The running call returned `value`.
    fn ok(&self, py: Python<'_>, value: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let ended = self.end_call(py);
        let Some(target) = self.take_current() else {
            return Err(PyRuntimeError::new_err(
                "taut worker: ok() without a running call",
            ));
        };
        self.complete(py, target, true, value, ended)
    }

    /// The running call (or the step that was about to start it) raised
    /// `exc`. With no call running, `exc` is raised again: it is the
    /// worker loop's own failure.
    fn fail(&self, py: Python<'_>, exc: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let ended = self.end_call(py);
        let Some(target) = self.take_current() else {
            return Err(PyErr::from_value(exc));
        };
        self.complete(py, target, false, exc, ended)
    }

    /// After a finish step, once Python completed the future.
    fn done(&self, py: Python<'_>, ok: bool) -> PyResult<Py<PyAny>> {
        self.after(py, ok, &mut StateLock::new(py, &self.shared.names), None)
    }

    /// After a start (or skip) step whose call turned out cancelled.
    fn skip(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.skipped(py)
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

    /// The `taut.Future` of the call this worker runs; None when idle, for
    /// an `executor.run` call (its asyncio future), or when the record is
    /// locked at this moment. Read in a forked child too: every lock of the
    /// record is taken with the GIL held and let go before any Python code
    /// runs, and a fork happens with the GIL held by the forking thread, so
    /// the child's copy is never locked. It only tries the lock all the
    /// same: a copy locked for good would hang the child.
    #[getter]
    fn running_future(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let guard = self.current_target.try_lock().ok()?;
        match guard.as_ref()? {
            Target::Future(future) => Some(future.clone_ref(py)),
            Target::Loop { .. } => None,
        }
    }
}

/// The Rust side of one `taut.ThreadPoolExecutor`.
#[pyclass(frozen, module = "taut._core")]
pub struct PoolCore {
    shared: Arc<Shared>,
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
            shared: Arc::new(Shared {
                pool: Pool::new(max_workers, max_queue),
                idle_timeout: seconds("idle_timeout", idle_timeout)?,
                id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
                waiting: PyDict::new(py).unbind(),
                orphaned: AtomicBool::new(false),
                names: Names::new(py)?,
                room_waiters: Mutex::new(VecDeque::new()),
                room_waiting: AtomicUsize::new(0),
                next_room_waiter: AtomicU64::new(1),
                room_turns: AtomicUsize::new(0),
                room_clock: Instant::now(),
                room_told_at_nanos: AtomicU64::new(0),
            }),
        })
    }

    /// Claim one worker start the pool asked for (submissions return how
    /// many are unclaimed): the slot for the new thread to take work with,
    /// or None when no start is owed. The caller starts the thread; a slot
    /// whose thread never reports in gives its place back (`give_back`, or
    /// when it is dropped), so an interrupted start is made good by the
    /// next submission rather than lost.
    fn claim(&self) -> Option<WorkerSlot> {
        if self.shared.orphaned.load(Ordering::Acquire) || !self.shared.pool.claim_start() {
            return None;
        }
        Some(WorkerSlot {
            shared: Arc::clone(&self.shared),
            thread_id: AtomicU64::new(0),
            current: AtomicU64::new(0),
            current_target: Mutex::new(None),
            started_ns: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            start_pending: AtomicBool::new(true),
        })
    }

    /// Queue a call and set `future._seq`. Returns how many worker starts
    /// are unclaimed (usually 0 or 1): the caller claims them (`claim`) and
    /// starts their threads. Raises `taut.QueueFull` when the bounded queue
    /// is full and `RuntimeError` once the pool is shut down.
    #[pyo3(signature = (future, func, args, kwargs=None))]
    fn submit(
        &self,
        py: Python<'_>,
        future: Py<PyAny>,
        func: Py<PyAny>,
        args: Py<PyTuple>,
        kwargs: Option<Py<PyDict>>,
    ) -> PyResult<usize> {
        Ok(self
            .queue(py, Target::Future(future), func, args, kwargs, None)?
            .0)
    }

    /// Queue a call whose outcome settles the asyncio future `waiter` on
    /// its loop, through `channel`. Returns `(unclaimed, seq, owed)`
    /// (`unclaimed`: as for `submit`); raises
    /// like `submit`. `seq` removes the call (`remove`) if the awaiting task
    /// is cancelled before a worker takes it. `wake` false: see
    /// `Pool::submit_waking`; `owed` says `wake_owed` should follow.
    ///
    /// `line`: a newcomer that keeps the FIFO order of the asyncio
    /// submitters waiting for room: while any wait (or were told there is
    /// room and are not back yet) it is refused as full, to wait behind
    /// them (`wait_for_room_async`). `turn`: a waiter told there is room,
    /// coming back (its turn ends, whatever the outcome).
    #[pyo3(signature = (channel, waiter, func, args, kwargs=None, wake=true, line=false, turn=false))]
    #[allow(clippy::too_many_arguments)]
    fn submit_async(
        &self,
        py: Python<'_>,
        channel: Py<LoopChannel>,
        waiter: Py<PyAny>,
        func: Py<PyAny>,
        args: Py<PyTuple>,
        kwargs: Option<Py<PyDict>>,
        wake: bool,
        line: bool,
        turn: bool,
    ) -> PyResult<(usize, u64, bool)> {
        if turn {
            self.shared.end_turn();
        } else if line && self.shared.has_line() {
            return Err(self.shared.queue_full(py));
        }
        let target = Target::Loop { channel, waiter };
        let job = Job::new(py, target, func, args, kwargs, None);
        let (unclaimed, _, seq, owed) = self.enqueue(py, job, wake)?;
        Ok((unclaimed, seq, owed))
    }

    /// Wake parked workers for queued calls that `submit_async(...,
    /// wake=False)` left without one. Returns how many worker starts are
    /// unclaimed (see `submit`).
    fn wake_owed(&self) -> usize {
        self.shared.pool.wake_owed();
        self.shared.pool.unclaimed()
    }

    /// An asyncio submitter found the bounded queue full: `notice` is
    /// pushed onto `channel` (`(notice, None, None)`: the loop's reader calls
    /// `notice._fire()`) when there may be room, in FIFO order with the
    /// other waiting asyncio submitters. Returns its id, which is its place
    /// in line, for `cancel_room_wait`. `place`: the id it had, for one told
    /// there was room that then lost it to a plain `submit`: it goes back
    /// to that place (ahead of those who came after it), not to the end.
    /// Pushed soon if there is room already. `channel` None (a loop
    /// without one): `notice()` is called on taut's callback thread instead,
    /// to hand the notice to its loop. `owners`: a set the notice is added
    /// to just before it joins the line (its loop's `closing_owners`), in
    /// this call: a Ctrl-C lands between two bytecodes, so the caller can
    /// never be cut short with the notice listed in one and not the other
    /// (or added, not listed: it would then pass on a turn it never held).
    #[pyo3(signature = (channel, notice, place=0, owners=None))]
    fn wait_for_room_async(
        &self,
        py: Python<'_>,
        channel: Option<Py<LoopChannel>>,
        notice: Py<PyAny>,
        place: u64,
        owners: Option<Bound<'_, PySet>>,
    ) -> PyResult<u64> {
        if channel.is_none() {
            // Here, on the loop's thread, where starting it may run Python;
            // never from a worker handing the turn out.
            ensure_callback_thread(py)?;
        }
        if let Some(owners) = owners {
            owners.add(notice.clone_ref(py))?;
        }
        let shared = &self.shared;
        let id = if place == 0 {
            shared.next_room_waiter.fetch_add(1, Ordering::Relaxed)
        } else {
            place
        };
        {
            let mut waiters = shared
                .room_waiters
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let waiter = RoomWaiter {
                id,
                channel,
                callback: notice,
            };
            // Ids grow with arrival, so the line stays sorted by them.
            let at = waiters.partition_point(|w| w.id < id);
            waiters.insert(at, waiter);
            shared.room_waiting.store(waiters.len(), Ordering::Release);
        }
        // Room may have appeared between the refused submit and now.
        shared.wake_room_waiters(py, false);
        Ok(id)
    }

    /// A place in the line of room (`wait_for_room_async`'s `place`) for a
    /// caller that joins it a moment later, from a task of its own (a
    /// batch's call): ahead of whoever asks for room from now on. Unused,
    /// it costs nothing (places only order the line).
    fn reserve_room_place(&self) -> u64 {
        self.shared.next_room_waiter.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether asyncio submitters wait for room (or were told there is
    /// some and have not come back yet): a newcomer that keeps their FIFO
    /// order waits behind them (as `submit_async`'s `line` does).
    fn has_room_line(&self) -> bool {
        self.shared.has_line()
    }

    /// Withdraw a room waiter (its task was cancelled). False if it was
    /// already told to try again: the caller then passes its turn on
    /// (`pass_room_on`).
    fn cancel_room_wait(&self, id: u64) -> bool {
        let shared = &self.shared;
        let mut waiters = shared
            .room_waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = waiters.len();
        waiters.retain(|w| w.id != id);
        shared.room_waiting.store(waiters.len(), Ordering::Release);
        waiters.len() != before
    }

    /// Tell the first asyncio submitter in line to try again if there is
    /// room and nobody was told for `age` seconds: the turns still out are
    /// stale, held by coroutines of loops that stopped without closing (they
    /// may never run again), and would keep the line waiting with the queue
    /// empty. Called now and then by a loop with coroutines in line (so one
    /// that runs). A stale turn's coroutine that does come back later and
    /// is refused goes back to its place in line, as any refused one does.
    /// True if someone was told.
    fn tell_past_stale_turns(&self, py: Python<'_>, age: f64) -> bool {
        let shared = &self.shared;
        if shared.room_waiting.load(Ordering::Acquire) == 0 || shared.pool.is_full() {
            return false;
        }
        let told_at = shared.room_told_at_nanos.load(Ordering::Acquire);
        let since = Duration::from_nanos(shared.room_nanos_now().saturating_sub(told_at));
        if since.as_secs_f64() < age {
            return false;
        }
        shared.wake_room_waiters(py, false);
        true
    }

    /// A room waiter that was told to try again will not (or came back
    /// through a plain `submit`, which knows nothing of turns): its turn
    /// ends, and the next one in line is told if there is room.
    fn pass_room_on(&self, py: Python<'_>) {
        self.shared.end_turn();
        self.shared.wake_room_waiters(py, false);
    }

    /// `submit` with queue notices through `tracker`. Returns `(unclaimed,
    /// position)` (`unclaimed`: as for `submit`), position: the 1-based queue position when the call cannot start at
    /// once, else None.
    #[pyo3(signature = (future, func, args, kwargs, tracker))]
    fn submit_tracked(
        &self,
        py: Python<'_>,
        future: Py<PyAny>,
        func: Py<PyAny>,
        args: Py<PyTuple>,
        kwargs: Option<Py<PyDict>>,
        tracker: Py<PyAny>,
    ) -> PyResult<(usize, Option<usize>)> {
        self.queue(
            py,
            Target::Future(future),
            func,
            args,
            kwargs,
            Some(tracker),
        )
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
            let shared = Arc::clone(&self.shared);
            if gil::detach(py, move || shared.pool.wait_for_room(slice)) {
                return Ok(());
            }
            py.check_signals()?;
        }
    }

    /// Remove a queued call whose future was cancelled. Returns None if a
    /// worker already took it, else `(notices, job)`: the `(tracker,
    /// position)` pairs of the calls behind it, for the caller to deliver,
    /// and the removed call's objects, for the caller to drop. `refused`:
    /// the call's submission is refused after all (no worker thread could
    /// start for it), not counted as cancelled.
    #[pyo3(signature = (seq, refused=false))]
    fn remove(
        &self,
        py: Python<'_>,
        seq: u64,
        refused: bool,
    ) -> PyResult<Option<(Py<PyList>, Py<PyTuple>)>> {
        let shared = &self.shared;
        if shared.orphaned.load(Ordering::Acquire) {
            return Ok(None);
        }
        let removed = if refused {
            shared.pool.withdraw(seq)
        } else {
            shared.pool.remove(seq)
        };
        let Some((job, updates)) = removed else {
            return Ok(None);
        };
        self.taken_out(py, seq, job, &updates).map(Some)
    }

    /// Take the oldest queued call out by hand (see `Pool::pop_front`):
    /// None if the queue is empty, else `(notices, call)` as for `remove`
    /// (the call's first item is a `taut.Future`, or the asyncio future
    /// of an `executor.run` call).
    fn pop_queued(&self, py: Python<'_>) -> PyResult<Option<(Py<PyList>, Py<PyTuple>)>> {
        let shared = &self.shared;
        if shared.orphaned.load(Ordering::Acquire) {
            return Ok(None);
        }
        let Some((seq, job, updates)) = shared.pool.pop_front() else {
            return Ok(None);
        };
        self.taken_out(py, seq, job, &updates).map(Some)
    }

    /// Give up on the worker running call `seq`: it leaves the ceiling (a
    /// replacement may start: the second value says how many worker starts
    /// are unclaimed, see `submit`) and exits after the call. False if
    /// `seq` is not running there.
    fn abandon(&self, slot: &Bound<'_, WorkerSlot>, seq: u64) -> (bool, usize) {
        let slot = slot.get();
        if seq == 0 || slot.current.load(Ordering::Acquire) != seq {
            return (false, 0);
        }
        if !slot.abandoned.swap(true, Ordering::AcqRel) {
            self.shared.pool.abandon_worker();
        }
        (true, self.shared.pool.unclaimed())
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
        async_exc::send(slot.thread_id.load(Ordering::Acquire), exc_type)
    }

    /// Change the ceiling; returns how many worker starts are unclaimed
    /// (see `submit`).
    fn resize(&self, py: Python<'_>, max_workers: usize) -> PyResult<usize> {
        if max_workers == 0 {
            return Err(PyValueError::new_err("max_workers must be greater than 0"));
        }
        self.shared.pool.resize(max_workers);
        self.shared.wake_room_waiters(py, false);
        Ok(self.shared.pool.unclaimed())
    }

    /// Refuse new calls; queued ones still run; idle workers exit; every
    /// asyncio submitter waiting for room is told (and then finds the pool
    /// shut down).
    fn shutdown(&self, py: Python<'_>) {
        self.shared.pool.shutdown();
        self.shared.wake_room_waiters(py, true);
    }

    /// Take every queued call out, appending their `(future, fn, args,
    /// kwargs)` in queue order to `into`. `waiting_only`: leave the calls a
    /// worker is already on its way to (see `Pool::drain_waiting`).
    ///
    /// Into the caller's list rather than returned: a Ctrl-C that came
    /// during a long drain is raised the moment this returns, before the
    /// caller could bind a returned list, and the calls (out of the queue,
    /// still pending) would be lost. The caller's list keeps them.
    #[pyo3(signature = (into, waiting_only=false))]
    fn drain(&self, py: Python<'_>, into: &Bound<'_, PyList>, waiting_only: bool) -> PyResult<()> {
        let pool = &self.shared.pool;
        let jobs = if waiting_only {
            pool.drain_waiting()
        } else {
            pool.drain()
        };
        self.shared.waiting.bind(py).clear();
        self.shared.wake_room_waiters(py, false);
        for job in jobs {
            into.append(job.into_call(py)?)?;
        }
        Ok(())
    }

    /// Release the GIL and spin (for the pool's spin window at most, and
    /// never past the caller's `timeout` in seconds) until a worker comes
    /// back for more work — having released the GIL, so that taking it back
    /// is immediate. A waiter calls this before parking: for a short call it
    /// saves the wake-up of a parked thread on both sides.
    #[pyo3(signature = (timeout = None))]
    fn spin_for_release(&self, py: Python<'_>, timeout: Option<f64>) {
        let pool = &self.shared.pool;
        let mut limit = pool.spin_window();
        if let Some(timeout) = timeout {
            if timeout.is_nan() || timeout <= 0.0 {
                return;
            }
            if timeout < limit.as_secs_f64() {
                limit = Duration::from_secs_f64(timeout);
            }
        }
        // Spin only when it is likely to pay: calls arrive close together
        // (workers are hot, not parked) and are short. Otherwise the caller
        // parks at once, as with the standard library, and costs no CPU.
        if !pool.is_hot() || !pool.calls_are_short(limit) {
            return;
        }
        let before = pool.released();
        let shared = Arc::clone(&self.shared);
        gil::detach(py, move || {
            // A worker spinning on our call may take the GIL at once.
            shared.pool.offer_gil();
            spin_until(limit, || shared.pool.released() != before)
        });
    }

    /// In a forked child: take the parent's queued calls out without
    /// blocking (a thread that does not exist in the child may hold the
    /// lock); their `(future, fn, args, kwargs)` in queue order, None if
    /// the lock was held.
    fn drain_after_fork(&self, py: Python<'_>) -> PyResult<Option<Vec<Py<PyTuple>>>> {
        self.shared.waiting.bind(py).clear();
        let Some(jobs) = self.shared.pool.try_drain() else {
            return Ok(None);
        };
        let calls = jobs
            .into_iter()
            .map(|job| Ok(job.into_call(py)?.unbind()))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Some(calls))
    }

    /// The 1-based position of queued call `seq`, None once it started.
    fn position(&self, seq: u64) -> Option<usize> {
        if self.shared.orphaned.load(Ordering::Acquire) {
            return None;
        }
        self.shared.pool.position(seq)
    }

    /// In a forked child, after `drain_after_fork`: the parent's pool is
    /// never touched again (its lock may be frozen), so `remove` and
    /// `position` on the futures it leaves behind answer without locking.
    fn orphan(&self) {
        self.shared.orphaned.store(true, Ordering::Release);
    }

    /// The pool's spin window in seconds: how long its workers and its
    /// result waiters spin before parking (three measured wake-ups of a
    /// parked thread, 50-250 µs; see `pool::SPIN_FLOOR`).
    fn spin_window(&self) -> f64 {
        self.shared.pool.spin_window().as_secs_f64()
    }

    /// True when this pool's calls are known to run longer than its spin
    /// window on average: a worker is then started without the submitter
    /// waiting for it to run (see `taut._worker_thread`).
    fn calls_are_long(&self) -> bool {
        self.shared.pool.calls_are_long()
    }

    /// True when called on a worker thread of this pool.
    fn in_worker(&self) -> bool {
        CURRENT_POOL.with(|c| c.get()) == self.shared.id
    }

    /// `(max_workers, workers, idle, running, queued, completed, failed,
    /// cancelled, abandoned)`.
    fn stats(&self) -> (usize, usize, usize, usize, usize, u64, u64, u64, u64) {
        let s = self.shared.pool.stats();
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

impl PoolCore {
    /// A queued call was taken out of the pool (cancelled, or by hand):
    /// forget its tracker, give the room to an asyncio submitter, and hand
    /// back `(notices, call)` for the caller to deliver and drop.
    fn taken_out(
        &self,
        py: Python<'_>,
        seq: u64,
        job: Job,
        updates: &[(u64, usize)],
    ) -> PyResult<(Py<PyList>, Py<PyTuple>)> {
        let shared = &self.shared;
        let waiting = shared.waiting.bind(py);
        waiting.del_item(seq).ok();
        let notices = notices(waiting, updates)?;
        shared.wake_room_waiters(py, false);
        Ok((notices.unbind(), job.into_call(py)?.unbind()))
    }

    fn queue(
        &self,
        py: Python<'_>,
        target: Target,
        func: Py<PyAny>,
        args: Py<PyTuple>,
        kwargs: Option<Py<PyDict>>,
        tracker: Option<Py<PyAny>>,
    ) -> PyResult<(usize, Option<usize>)> {
        let job = Job::new(py, target, func, args, kwargs, tracker);
        let (spawn, waiting_at, _, _) = self.enqueue(py, job, true)?;
        Ok((spawn, waiting_at))
    }

    fn enqueue(&self, py: Python<'_>, job: Job, wake: bool) -> EnqueueResult {
        let shared = &self.shared;
        let tracker_for_queue = job.tracker.as_ref().map(|t| t.clone_ref(py));
        let future = match &job.target {
            Target::Future(future) => Some(future.clone_ref(py)),
            Target::Loop { .. } => None,
        };
        let tracked = tracker_for_queue.is_some();
        match shared.pool.submit_waking(job, tracked, wake) {
            Ok((s, owed)) => {
                // No worker can run this call before we return: running it
                // needs the GIL, which this thread holds throughout.
                if let Some(future) = future {
                    future.bind(py).setattr(shared.names.seq.bind(py), s.seq)?;
                }
                if let (Some(tracker), Some(_)) = (tracker_for_queue, s.waiting_at) {
                    shared.waiting.bind(py).set_item(s.seq, tracker)?;
                }
                // Every start still unclaimed, not only this call's: one an
                // interrupted caller left behind is started by this one.
                Ok((s.unclaimed, s.waiting_at, s.seq, owed))
            }
            // The refused job is dropped here, with the GIL held, on the
            // submitting thread: the caller still holds every object in it.
            Err(Refused::Shutdown(_)) => Err(PyRuntimeError::new_err(
                "cannot schedule new futures after shutdown",
            )),
            Err(Refused::Full(_)) => Err(shared.queue_full(py)),
        }
    }
}
