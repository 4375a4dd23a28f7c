//! Python bindings of the timer: `_core.Deadline`, `_core.monotonic`, the
//! Python callback thread, and the fork/exit hooks.
//!
//! Effects that need no GIL (flag, Rust waiters, fd writes, signals, Rust
//! actions) run on the timer thread. Effects that need the GIL (a Python callable, an
//! asynchronous exception) are queued to one Python `threading.Thread`,
//! "taut-timer-callbacks", whose loop waits in Rust with the GIL released.
//! So the timer thread never waits for the GIL: a busy Python thread can
//! delay the Python callbacks by up to the switch interval, never the timer.

use std::collections::VecDeque;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering as AO};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyType};

use crate::async_exc;
use crate::clamp::duration_from_secs;
use crate::gil;
use crate::next_instruction;
use crate::py_clamp::{clamp_timeout, describe, int_in, u64_in};
use crate::timer::{self, Action, Entry};

/// How often a wait holding up a Python thread wakes to look for signals.
pub(crate) const SIGNAL_SLICE: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------
// The Python callback queue
// ---------------------------------------------------------------------------

enum Job {
    Call(Py<PyAny>),
    /// A reference the timer thread must let go of but cannot drop without
    /// the GIL: the callback thread drops it.
    Drop(Py<PyAny>),
    Interrupt {
        entry: Arc<Entry>,
        thread_id: u64,
        exc_type: Py<PyAny>,
        /// The address of the frame that must be on the thread's stack for
        /// the interrupt to land (0: anywhere); see `interrupt_thread`.
        block: usize,
        /// How often it was put off already (see [`interrupt_later`]).
        attempt: u32,
    },
    /// An interrupt is due in about a switch interval (see
    /// [`arm_gil_lead`]): take the GIL now, so as to hold it when it fires.
    GilLead {
        /// The interrupt's deadline; gone or settled: nothing to do.
        entry: Weak<Entry>,
        /// When it fires ([`timer::now_ns`]).
        at_ns: u64,
    },
    /// An interrupt armed for a thread's next instruction
    /// ([`next_instruction::arm`]), looked at again after [`FALLBACK_NS`].
    InterruptBlocked {
        thread_id: u64,
        exc_type: Py<PyAny>,
        /// What the arming stored: only that is withdrawn.
        armed: Py<PyAny>,
    },
}

/// How long an interrupt waits for a thread's next instruction before it
/// counts the thread as blocked in a C call.
const FALLBACK_NS: u64 = 50_000_000;

struct Queue {
    state: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
    /// The state's flag, readable without the lock.
    closed: AtomicBool,
}

impl Queue {
    fn new() -> Self {
        Queue {
            state: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// Called on the timer thread without the GIL.
    fn push(&self, job: Job) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.1 {
            // Closed at interpreter exit: nobody will run it. Dropping a Python
            // reference here, without the GIL, would defer to PyO3's global
            // pool; leaking one object at exit is cheaper and cannot block.
            std::mem::forget(job);
            return;
        }
        st.0.push_back(job);
        drop(st);
        self.ready.notify_one();
    }

    /// The next job if one is waiting, without blocking.
    fn try_pop(&self) -> Option<Job> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.0.pop_front()
    }

    /// True if a job is waiting.
    fn has_job(&self) -> bool {
        !self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .is_empty()
    }

    /// `pop`, passing over the GIL leads of interrupts that will not fire
    /// (cancelled, or their scope gone): those must not take the GIL from
    /// a busy thread for nothing.
    fn pop_live(&self) -> Option<Job> {
        loop {
            let job = self.pop()?;
            if let Job::GilLead { entry, .. } = &job {
                if !entry.upgrade().is_some_and(|e| e.is_pending()) {
                    continue;
                }
            }
            return Some(job);
        }
    }

    /// Blocks (GIL released by the caller) until a job or close.
    fn pop(&self) -> Option<Job> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(job) = st.0.pop_front() {
                return Some(job);
            }
            if st.1 {
                return None;
            }
            st = self.ready.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn close(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.closed.store(true, AO::Release);
        self.ready.notify_all();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(AO::Acquire)
    }
}

static QUEUE: AtomicPtr<Queue> = AtomicPtr::new(ptr::null_mut());

fn queue() -> &'static Queue {
    let p = QUEUE.load(AO::Acquire);
    if !p.is_null() {
        // SAFETY: published queues are leaked, never freed.
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::new(Queue::new()));
    match QUEUE.compare_exchange(ptr::null_mut(), fresh, AO::AcqRel, AO::Acquire) {
        // SAFETY: just published, never freed.
        Ok(_) => unsafe { &*fresh },
        Err(winner) => {
            // SAFETY: fresh lost the race and was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: published, never freed.
            unsafe { &*winner }
        }
    }
}

static CALLBACK_THREAD_STARTED: AtomicBool = AtomicBool::new(false);
/// The `threading.Thread` running the callback loop. Only touched with the
/// GIL held and without calling Python while locked, so no thread can hold
/// it across a `fork()`.
static CALLBACK_THREAD: Mutex<Option<Py<PyAny>>> = Mutex::new(None);

pub(crate) fn ensure_callback_thread(py: Python<'_>) -> PyResult<()> {
    if queue().is_closed() {
        // An atexit hook that runs after taut's own (registered before
        // taut was imported): the callback would be dropped unrun, and an
        // interrupt never raised. Say so instead.
        return Err(PyRuntimeError::new_err(
            "taut's deadline callbacks and interrupts have stopped: the interpreter is \
             exiting (taut's atexit hooks ran)",
        ));
    }
    if CALLBACK_THREAD_STARTED.load(AO::Acquire) {
        return Ok(());
    }
    if CALLBACK_THREAD_STARTED
        .compare_exchange(false, true, AO::AcqRel, AO::Acquire)
        .is_err()
    {
        return Ok(());
    }
    // The loop is Python (`taut._timer._callback_loop`), so the callbacks
    // it runs never have a Rust frame below them.
    let started = (|| -> PyResult<Py<PyAny>> {
        let thread = py
            .import("taut._timer")?
            .getattr("_start_callback_thread")?
            .call0()?;
        Ok(thread.unbind())
    })();
    match started {
        Ok(thread) => {
            *CALLBACK_THREAD.lock().unwrap_or_else(|p| p.into_inner()) = Some(thread);
            Ok(())
        }
        Err(e) => {
            CALLBACK_THREAD_STARTED.store(false, AO::Release);
            Err(e)
        }
    }
}

/// Take back an interrupt set for the calling thread that has not landed
/// yet (none pending: nothing happens). Unlike
/// `PyThreadState_SetAsyncExc(thread, NULL)` before CPython 3.13, it leaves
/// no "asynchronous exception pending" flag raised for good (see
/// `async_exc::take_back_own`). An exception a signal handler raises
/// meanwhile (Ctrl-C) is raised here.
#[pyfunction]
pub fn _take_back_own_interrupt(py: Python<'_>) -> PyResult<()> {
    async_exc::take_back_own(py)
}

/// The next Python callable for taut's callback thread to run; None once
/// the queue is closed (interpreter exit). Waits with the GIL released.
/// Interrupts are delivered here, with the GIL held and no Python code run.
/// Not for direct use: `taut._timer._callback_loop` calls it.
#[pyfunction]
pub fn _timer_next_callback(py: Python<'_>) -> Option<Py<PyAny>> {
    let q = queue();
    loop {
        // A job already waiting is taken with the GIL this thread holds:
        // let go of it in between, and a busy thread takes it back for a
        // whole switch interval (5 ms) before the job after it can run (an
        // interrupt due behind the drop of an earlier deadline's objects
        // landed 5 ms late).
        let next = match q.try_pop() {
            Some(job) => job,
            None => gil::detach(py, || q.pop_live())?,
        };
        match next {
            Job::Call(callable) => return Some(callable),
            Job::Drop(object) => drop(object),
            Job::GilLead { entry, at_ns } => hold_gil_for_interrupt(&entry, at_ns, q),
            Job::InterruptBlocked {
                thread_id,
                exc_type,
                armed,
            } => {
                // Still waiting (not taken back, not raised): the thread is
                // blocked in a C call.
                if next_instruction::withdraw(py, thread_id, Some(armed.bind(py))) {
                    async_exc::send(thread_id, exc_type.bind(py));
                }
            }
            Job::Interrupt {
                entry,
                thread_id,
                exc_type,
                block,
                attempt,
            } => {
                // With the GIL held, this check and cancel()'s closing are
                // serialised: once the owner has cancelled (left its scope),
                // no interrupt is set any more.
                if entry.is_closed() {
                    continue;
                }
                // Raised inside a scope's own entry or exit, the interrupt
                // would leave that scope half open (its context entry and
                // its deadline): put it off until the thread is back in
                // the block. So too while the block is not running at all
                // (a task suspended at an `await`: the thread runs the
                // loop or another task). The check runs no Python
                // bytecode, so the thread cannot move on before the
                // exception is set.
                if put_off(py, thread_id, block) {
                    interrupt_later(entry, thread_id, exc_type, block, attempt);
                    continue;
                }
                // On CPython 3.13 the thread may raise it at a loop's
                // backward jump, outside the blocks around the loop (see
                // `taut._backward_jump`): raised at its next instruction
                // instead. A thread blocked in a C call runs none for a
                // while: then the asynchronous exception after all (raised
                // as the call returns, inside those blocks), rather than
                // its code calling the hook meanwhile.
                let armed = without_gc_then(py, || {
                    next_instruction::arm(py, thread_id, exc_type.bind(py))
                });
                if let Some(armed) = armed {
                    entry.mark_delivered();
                    push_later(
                        FALLBACK_NS,
                        Job::InterruptBlocked {
                            thread_id,
                            exc_type,
                            armed,
                        },
                    );
                    continue;
                }
                // exc_type was checked to be an exception class.
                async_exc::send(thread_id, exc_type.bind(py));
                entry.mark_delivered();
            }
        }
    }
}

/// The longest the callback thread holds the GIL waiting for an interrupt
/// to fire (see [`hold_gil_for_interrupt`]): every Python thread stands
/// still meanwhile. Taken this early, the GIL is let go again, and taken
/// back at expiry the usual way.
const LEAD_HOLD_NS: u64 = 1_000_000;

/// How long past its deadline the callback thread goes on holding the GIL
/// for an interrupt's job: the timer thread's own lateness, with room for a
/// loaded machine.
const LEAD_SLACK_NS: u64 = 1_000_000;

/// Have the callback thread ask for the GIL a switch interval before the
/// interrupt armed on `entry` (at `at_ns`) fires. A thread running busy
/// Python code keeps the GIL until another thread has waited a whole switch
/// interval for it (5 ms by default): asked for only at expiry, the
/// interrupt landed that late. Asked for this early, the GIL comes about
/// when the interrupt fires. Cancelled with the interrupt
/// ([`timer::arm_lead`]): a scope that ends in time costs nothing more.
fn arm_gil_lead(py: Python<'_>, entry: &Arc<Entry>, at_ns: u64) -> PyResult<()> {
    let interval: f64 = py
        .import("sys")?
        .getattr("getswitchinterval")?
        .call0()?
        .extract()?;
    let weak = Arc::downgrade(entry);
    timer::arm_lead(
        entry,
        at_ns,
        timer::secs_to_ns(interval),
        Box::new(move || queue().push(Job::GilLead { entry: weak, at_ns })),
    );
    Ok(())
}

/// The callback thread holds the GIL a little before an interrupt fires
/// (see [`arm_gil_lead`]): keep it until the interrupt's job is queued, so
/// that it is delivered without another switch interval's wait. Only when
/// the interrupt is due within [`LEAD_HOLD_NS`] (the GIL came early when
/// the busy thread let go of it by itself), and never past
/// [`LEAD_SLACK_NS`] after it; cancelled meanwhile, nothing is awaited.
fn hold_gil_for_interrupt(entry: &Weak<Entry>, at_ns: u64, q: &Queue) {
    let now = timer::now_ns();
    if at_ns.saturating_sub(now) > LEAD_HOLD_NS {
        return;
    }
    let give_up = at_ns.saturating_add(LEAD_SLACK_NS);
    while timer::now_ns() < give_up {
        let Some(entry) = entry.upgrade() else { return };
        if entry.is_cancelled() || entry.is_closed() {
            return;
        }
        if entry.is_expired() && q.has_job() {
            return;
        }
        // Let the timer thread have a CPU to fire it (a loaded machine).
        std::thread::yield_now();
    }
}

/// Whether the modules an interrupt's delivery looks up were imported.
static IMPORTED_FOR_DELIVERY: AtomicBool = AtomicBool::new(false);

/// Import what delivering an interrupt looks up (`put_off`,
/// `next_instruction::arm`), on the thread that arms it. Imported at expiry
/// by the callback thread instead, against a busy thread holding the GIL,
/// the import's own bytecode passed the GIL back and forth, a whole switch
/// interval each time: a process's first interrupt landed 6 to 9 switch
/// intervals late (30 to 45 ms instead of 5).
fn import_for_delivery(py: Python<'_>) -> PyResult<()> {
    if IMPORTED_FOR_DELIVERY.load(AO::Acquire) {
        return Ok(());
    }
    py.import("gc")?;
    py.import("taut._signal_interrupt")?;
    if py.version_info() >= (3, 13) {
        py.import("functools")?;
        py.import("taut._backward_jump")?;
    }
    IMPORTED_FOR_DELIVERY.store(true, AO::Release);
    Ok(())
}

/// True if an interrupt for thread `thread_id` must wait: the thread is
/// running a deadline scope's entry or exit (a code object of
/// `taut._signal_interrupt._protected` on its stack), or `block` (a frame's
/// address, 0 for none) is not on its stack. Only C-level calls, no Python
/// bytecode: no other thread runs meanwhile.
fn put_off(py: Python<'_>, thread_id: u64, block: usize) -> bool {
    without_gc_then(py, || put_off_now(py, thread_id, block).then_some(())).is_some()
}

/// `look()`, with no garbage collection meanwhile (None if it cannot be
/// held off). Looking at another thread's frames allocates (frame objects
/// before 3.12, tuples); an allocation may start a collection, and a
/// __del__ run by it is bytecode: the thread could move on meanwhile.
fn without_gc_then<T>(py: Python<'_>, look: impl FnOnce() -> Option<T>) -> Option<T> {
    let gc = py.import("gc").ok()?;
    let collecting = gc
        .call_method0("isenabled")
        .and_then(|on| on.is_truthy())
        .unwrap_or(false);
    if collecting && gc.call_method0("disable").is_err() {
        return None;
    }
    let found = look();
    if collecting {
        let _ = gc.call_method0("enable");
    }
    found
}

fn put_off_now(py: Python<'_>, thread_id: u64, block: usize) -> bool {
    let check = || -> PyResult<bool> {
        let protected = py.import("taut._signal_interrupt")?.getattr("_protected")?;
        let frames = py.import("sys")?.getattr("_current_frames")?.call0()?;
        let Some(mut frame) = frames.cast::<PyDict>()?.get_item(thread_id)? else {
            return Ok(false);
        };
        let mut block_running = block == 0;
        while !frame.is_none() {
            if protected.contains(frame.getattr("f_code")?)? {
                return Ok(true);
            }
            block_running |= frame.as_ptr() as usize == block;
            frame = frame.getattr("f_back")?;
        }
        Ok(!block_running)
    };
    check().unwrap_or(false)
}

/// Queue an interrupt put off by [`put_off`] again: after 1 ms, backing off
/// to 50 ms (the thread leaves the scope code in microseconds; a clock of
/// the user's that blocks there, or a block suspended for long, must not
/// make this spin).
fn interrupt_later(
    entry: Arc<Entry>,
    thread_id: u64,
    exc_type: Py<PyAny>,
    block: usize,
    attempt: u32,
) {
    let delay_ns = (1_000_000u64 << attempt.min(6)).min(50_000_000);
    push_later(
        delay_ns,
        Job::Interrupt {
            entry,
            thread_id,
            exc_type,
            block,
            attempt: attempt.saturating_add(1),
        },
    );
}

/// Queue `job` for the callback thread `delay_ns` from now, from a timer
/// entry of its own: the callback thread goes on with other jobs meanwhile
/// instead of sleeping on this one.
fn push_later(delay_ns: u64, job: Job) {
    let entry = timer::arm_ns(timer::now_ns().saturating_add(delay_ns));
    entry.add_action(Box::new(move || queue().push(job)));
}

// ---------------------------------------------------------------------------
// Deadline
// ---------------------------------------------------------------------------

/// One armed deadline on the process's timer thread.
#[pyclass(frozen, module = "taut._core", name = "Deadline")]
pub struct Deadline {
    entry: Arc<Entry>,
    at: f64,
}

impl Deadline {
    /// Another handle on the same armed deadline (a scope keeps one
    /// without a Python object until Python asks for it).
    pub(crate) fn share(&self) -> Deadline {
        Deadline {
            entry: Arc::clone(&self.entry),
            at: self.at,
        }
    }

    /// The timer entry, so other bindings can attach pure-Rust actions.
    pub(crate) fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }

    /// After a `cancel()` that found the deadline fired: an interrupt may
    /// have been set for this thread but not yet raised (it lands at the
    /// next bytecode boundary). The owner is leaving its scope: discard it
    /// so it cannot hit unrelated code. An exception a signal handler
    /// raises meanwhile (Ctrl-C) is returned (see `async_exc::take_back_own`).
    fn undo_delivery(&self, py: Python<'_>) -> PyResult<()> {
        if self.entry.was_delivered() {
            return async_exc::take_back_own(py);
        }
        Ok(())
    }

    /// Arm a deadline at `at` (absolute `time.monotonic()` seconds).
    pub(crate) fn arm(at: f64) -> PyResult<Self> {
        if at.is_nan() {
            return Err(PyValueError::new_err(
                "at must be a time.monotonic() value in seconds, got nan (float)",
            ));
        }
        Ok(Deadline {
            entry: timer::arm_ns(timer::secs_to_ns(at)),
            at,
        })
    }
}

/// An action for `entry` that runs `effect` through
/// [`Entry::run_unless_closed`]: never once the owner's `cancel()` returned.
/// Holds the entry weakly (the entry holds the action).
#[cfg(unix)]
fn unless_closed(entry: &Arc<Entry>, effect: impl FnOnce() + Send + 'static) -> Action {
    let entry = Arc::downgrade(entry);
    Box::new(move || {
        if let Some(entry) = entry.upgrade() {
            entry.run_unless_closed(effect);
        }
    })
}

/// Signals sent by [`Deadline::signal_main_thread`] that no handler has claimed
/// yet (see `_take_sent_signals`).
static SIGNALS_SENT: AtomicU64 = AtomicU64::new(0);

#[cfg(unix)]
fn is_signal_number(signum: i32) -> bool {
    // SAFETY: sigaddset only writes the local set; it rejects (EINVAL)
    // numbers that are not signals of this platform.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        signum > 0 && libc::sigaddset(&mut set, signum) == 0
    }
}

/// Have taut's callback thread call `callable()` (with the GIL, no Rust
/// frame below it). No Python code runs here and no GIL is needed, so a
/// worker may call it. False once the queue is closed (interpreter exit):
/// it will never be called. The caller started the thread before
/// (`ensure_callback_thread`, where starting it may run Python).
pub(crate) fn call_on_callback_thread(callable: Py<PyAny>) -> bool {
    let q = queue();
    if q.is_closed() {
        std::mem::forget(callable); // as `Queue::push` does: no GIL assumed here
        return false;
    }
    q.push(Job::Call(callable));
    true
}

/// Hand `object` to the callback thread to be dropped there with the GIL
/// (for the timer thread, which must neither take the GIL nor drop a
/// Python reference without it).
pub(crate) fn drop_on_callback_thread(object: Py<PyAny>) {
    queue().push(Job::Drop(object));
}

/// Queue `action` for expiry; if the deadline already fired, run it now while
/// keeping the GIL. Only for actions that just hand a job to the callback
/// queue (a short Rust lock nobody holds while waiting for the GIL). Keeping
/// the GIL matters for interrupts: the callback thread can then set the
/// exception only once this thread next yields the GIL (switch interval or a
/// blocking call), so it lands in the caller's block rather than in the
/// registering `__enter__`.
pub(crate) fn add_or_run_inline(entry: &Entry, action: Action) {
    if let Err(action) = entry.try_add_action(action) {
        if entry.is_expired() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(action));
        }
    }
}

fn add_or_run_detached(py: Python<'_>, entry: &Entry, action: Action) {
    if let Err(action) = entry.try_add_action(action) {
        if entry.is_expired() {
            // Already fired: run it now, but without the GIL, as promised.
            gil::detach(py, move || {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(action));
            });
        }
    }
}

/// How the timer writes to a notify fd without ever blocking.
#[derive(Clone, Copy)]
pub(crate) enum FdKind {
    Socket,
    NonBlocking,
}

#[cfg(unix)]
pub(crate) fn fd_kind(fd: i32) -> PyResult<FdKind> {
    // SAFETY: fcntl/getsockopt on an integer fd only read kernel state.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return Err(PyOSError::new_err(format!(
                "fd must be an open file descriptor, got {fd}: {}",
                std::io::Error::last_os_error()
            )));
        }
        let mut ty: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let is_socket = libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        ) == 0;
        if is_socket {
            Ok(FdKind::Socket)
        } else if flags & libc::O_NONBLOCK != 0 {
            Ok(FdKind::NonBlocking)
        } else {
            Err(PyValueError::new_err(format!(
                "fd must be a socket or a non-blocking pipe (os.set_blocking(fd, False)), \
                 got blocking fd {fd}: the timer thread must never block on a full pipe"
            )))
        }
    }
}

#[cfg(unix)]
pub(crate) fn write_byte(fd: i32, kind: FdKind) {
    let byte = [1u8];
    // SAFETY: writes one byte from a valid buffer; never blocks (MSG_DONTWAIT
    // or an O_NONBLOCK fd). A full buffer (EAGAIN) already means "wake up".
    unsafe {
        match kind {
            FdKind::Socket => {
                #[cfg(any(target_os = "linux", target_os = "android"))]
                let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
                #[cfg(not(any(target_os = "linux", target_os = "android")))]
                let flags = libc::MSG_DONTWAIT;
                libc::send(fd, byte.as_ptr().cast(), 1, flags);
            }
            FdKind::NonBlocking => {
                libc::write(fd, byte.as_ptr().cast(), 1);
            }
        }
    }
}

fn check_exception_class(exc_type: &Bound<'_, PyAny>) -> PyResult<()> {
    let ok = exc_type
        .cast::<PyType>()
        .map(|t| {
            t.is_subclass_of::<pyo3::exceptions::PyBaseException>()
                .unwrap_or(false)
        })
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(PyTypeError::new_err(format!(
            "exc_type must be an exception class, got {}",
            describe(exc_type, 80)?
        )))
    }
}

#[pymethods]
impl Deadline {
    #[new]
    fn new(at: &Bound<'_, PyAny>) -> PyResult<Self> {
        // A bool is a float to `extract`, but never a moment in time.
        let extracted = if at.is_instance_of::<PyBool>() {
            Err(PyTypeError::new_err("bool"))
        } else {
            at.extract::<f64>()
        };
        let at = match extracted {
            Ok(at) => at,
            // An int beyond the float range: a moment that never comes (or
            // long gone), not an OverflowError from the conversion.
            Err(err) if err.is_instance_of::<PyOverflowError>(at.py()) => {
                if at.gt(0)? {
                    f64::INFINITY
                } else {
                    f64::NEG_INFINITY
                }
            }
            Err(_) => {
                return Err(PyTypeError::new_err(format!(
                    "at must be a time.monotonic() value in seconds, got {}",
                    describe(at, 80)?
                )))
            }
        };
        Self::arm(at)
    }

    #[getter]
    fn at(&self) -> f64 {
        self.at
    }

    #[getter]
    fn expired(&self) -> bool {
        self.entry.is_expired()
    }

    #[getter]
    fn cancelled(&self) -> bool {
        self.entry.is_cancelled()
    }

    fn remaining(&self) -> f64 {
        if self.entry.is_expired() {
            return 0.0;
        }
        (self.at - monotonic()).max(0.0)
    }

    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        let was_pending = self.entry.cancel();
        if !was_pending {
            self.undo_delivery(py)?;
        }
        Ok(was_pending)
    }

    /// `cancel()`, and whether the owner left in time: True if the deadline
    /// had not fired and the clock still reads before `at`.
    pub(crate) fn cancel_in_time(&self, py: Python<'_>) -> PyResult<bool> {
        // Only a deadline that had not fired (so nothing was delivered) can
        // be in time: the undoing in `cancel` is never needed here.
        if !self.entry.cancel() {
            self.undo_delivery(py)?;
            return Ok(false);
        }
        Ok(monotonic() < self.at)
    }

    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        // Through the one timeout gate: `wait(10**400)` is a long wait, not
        // an OverflowError, and a bool or text is refused by name.
        let timeout = match timeout {
            None => None,
            Some(t) => clamp_timeout(t, "timeout")?,
        };
        if !self.entry.is_pending() {
            return Ok(self.entry.is_expired());
        }
        let entry = Arc::clone(&self.entry);
        let limit = timeout.map(duration_from_secs);
        if !gil::is_main_thread() {
            // Signals reach only the main thread: nothing to look for here.
            return Ok(gil::detach(py, move || entry.wait(limit)));
        }
        gil::detach(py, move || {
            entry.wait_interruptible(limit, SIGNAL_SLICE, || {
                gil::attach_briefly(|py| py.check_signals())
            })
        })
    }

    fn notify_fd(&self, py: Python<'_>, fd: &Bound<'_, PyAny>) -> PyResult<()> {
        // Any int is checked here (a bool, or one beyond a C int, is not an
        // fd), so the error names the parameter instead of an OverflowError.
        let fd = int_in("fd", fd, 0, i32::MAX.into(), "an open file descriptor")? as i32;
        #[cfg(unix)]
        {
            let kind = fd_kind(fd)?;
            // Not after cancel() returned: the owner may close the fd then.
            let write = unless_closed(&self.entry, move || write_byte(fd, kind));
            add_or_run_detached(py, &self.entry, write);
            Ok(())
        }
        #[cfg(not(unix))]
        {
            let _ = (py, fd);
            Err(pyo3::exceptions::PyNotImplementedError::new_err(
                "notify_fd is only available on Unix",
            ))
        }
    }

    /// At expiry the timer thread itself sends `signum` to the main thread
    /// with `pthread_kill`: no GIL is needed, so the main thread, busy in pure
    /// Python code, gets the signal at once instead of after the switch
    /// interval the callback thread would wait for the GIL. Nothing is sent
    /// if the deadline has already fired, or once `cancel()` has returned.
    /// Only the main thread: it outlives the timer, and only it runs Python
    /// signal handlers.
    fn signal_main_thread(&self, signum: &Bound<'_, PyAny>) -> PyResult<()> {
        #[cfg(unix)]
        {
            // A bool is an int to Python, but never a signal.
            let signum = match signum.extract::<i32>() {
                Ok(n) if is_signal_number(n) && !signum.is_instance_of::<PyBool>() => n,
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "signum must be a signal number of this platform, got {}",
                        describe(signum, 80)?
                    )))
                }
            };
            // Already fired: the caller's own (GIL-bound) path sends it. Not
            // after cancel() returned: the program's handler may be back.
            let send = unless_closed(&self.entry, move || {
                let main = gil::main_thread();
                if main == 0 {
                    return;
                }
                SIGNALS_SENT.fetch_add(1, AO::AcqRel);
                // SAFETY: the main thread lives as long as the process;
                // pthread_kill only queues a signal for it.
                let failed = unsafe { libc::pthread_kill(main as libc::pthread_t, signum) } != 0;
                if failed {
                    SIGNALS_SENT.fetch_sub(1, AO::AcqRel);
                }
            });
            let _ = self.entry.try_add_action(send);
            Ok(())
        }
        #[cfg(not(unix))]
        {
            let _ = signum;
            Err(pyo3::exceptions::PyNotImplementedError::new_err(
                "signal_main_thread is only available on Unix",
            ))
        }
    }

    fn call_soon(&self, py: Python<'_>, r#fn: Bound<'_, PyAny>) -> PyResult<()> {
        if !r#fn.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "fn must be callable, got {}",
                describe(&r#fn, 80)?
            )));
        }
        ensure_callback_thread(py)?;
        let callable = r#fn.unbind();
        add_or_run_inline(
            &self.entry,
            Box::new(move || queue().push(Job::Call(callable))),
        );
        Ok(())
    }

    /// `block`: a frame of that thread; the interrupt lands only while it
    /// is on the thread's stack (put off meanwhile). Kept by address only:
    /// the caller keeps the frame alive until it cancels this deadline.
    #[pyo3(signature = (thread_id, exc_type, *, block = None))]
    fn interrupt_thread(
        &self,
        py: Python<'_>,
        thread_id: &Bound<'_, PyAny>,
        exc_type: Bound<'_, PyAny>,
        block: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let thread_id = u64_in("thread_id", thread_id, "a thread's threading.get_ident()")?;
        check_exception_class(&exc_type)?;
        let frame_type = py.import("types")?.getattr("FrameType")?;
        let block = match block {
            None => 0,
            Some(frame) if frame.is_instance(&frame_type)? => frame.as_ptr() as usize,
            Some(other) => {
                return Err(PyTypeError::new_err(format!(
                    "block must be a frame or None, got {}",
                    describe(other, 80)?
                )))
            }
        };
        ensure_callback_thread(py)?;
        import_for_delivery(py)?;
        arm_gil_lead(py, &self.entry, timer::secs_to_ns(self.at))?;
        let weak: Weak<Entry> = Arc::downgrade(&self.entry);
        let exc_type = exc_type.unbind();
        add_or_run_inline(
            &self.entry,
            Box::new(move || {
                if let Some(entry) = weak.upgrade() {
                    queue().push(Job::Interrupt {
                        entry,
                        thread_id,
                        exc_type,
                        block,
                        attempt: 0,
                    });
                } else {
                    std::mem::forget(exc_type);
                }
            }),
        );
        Ok(())
    }

    fn __repr__(&self) -> String {
        let state = if self.entry.is_expired() {
            "expired"
        } else if self.entry.is_cancelled() {
            "cancelled"
        } else {
            "pending"
        };
        format!("<taut._core.Deadline at={:.6} {state}>", self.at)
    }
}

// ---------------------------------------------------------------------------
// Module functions
// ---------------------------------------------------------------------------

/// Seconds on the timer's clock, the clock `time.monotonic()` reads.
#[pyfunction]
pub fn monotonic() -> f64 {
    timer::now_ns() as f64 / 1e9
}

/// How many signals `Deadline.signal_main_thread` sent since the last call (and
/// back to zero): a signal handler's way to tell a signal of taut's from one
/// the program sent. Signals of one number merge while pending, so any
/// count means the one delivered was (at least also) taut's.
#[pyfunction]
pub fn _take_sent_signals() -> u64 {
    SIGNALS_SENT.swap(0, AO::AcqRel)
}

/// Reset the timer and the callback thread in a forked child.
#[pyfunction]
pub fn _timer_after_fork() {
    timer::reset_after_fork();
    SIGNALS_SENT.store(0, AO::Release);
    QUEUE.store(Box::into_raw(Box::new(Queue::new())), AO::Release);
    CALLBACK_THREAD_STARTED.store(false, AO::Release);
    // The parent's thread object: nothing runs it here. The mutex cannot be
    // held (see CALLBACK_THREAD), and try_lock keeps that a non-issue anyway.
    if let Ok(mut slot) = CALLBACK_THREAD.try_lock() {
        slot.take();
    }
}

/// Stop the timer thread and the Python callback thread (interpreter exit).
#[pyfunction]
pub fn _timer_shutdown(py: Python<'_>) -> PyResult<()> {
    gil::detach(py, timer::shutdown);
    queue().close();
    let thread = CALLBACK_THREAD
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some(thread) = thread {
        // Bounded: a callback stuck in C code must not hang interpreter exit.
        thread.call_method1(py, "join", (1.0,))?;
    }
    Ok(())
}

/// Diagnostics: running, heap slots, contained action panics, callback thread.
#[pyfunction]
pub fn _timer_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("running", timer::is_running())?;
    d.set_item("heap_len", timer::heap_len())?;
    d.set_item("action_panics", timer::action_panics())?;
    d.set_item("callback_thread", CALLBACK_THREAD_STARTED.load(AO::Acquire))?;
    Ok(d)
}

/// Bench/test probe: arm a deadline `delay` seconds ahead and report, in
/// seconds, how late (a) a Rust action ran on the timer thread and (b) a Rust
/// waiter (this thread, GIL released) woke. Measures GIL-free lateness.
#[pyfunction]
pub fn _timer_probe(py: Python<'_>, delay: f64) -> (f64, f64) {
    gil::detach(py, move || {
        let at = timer::now_ns().saturating_add((delay.max(0.0) * 1e9) as u64);
        let entry = timer::arm_ns(at);
        let ran_at = Arc::new(AtomicU64::new(0));
        let r = Arc::clone(&ran_at);
        entry.add_action(Box::new(move || r.store(timer::now_ns(), AO::Release)));
        entry.wait(Some(Duration::from_secs(60)));
        let woke = timer::now_ns();
        let mut ran = ran_at.load(AO::Acquire);
        // The waiter may be unparked before the action (both happen at expiry).
        while ran == 0 && timer::now_ns() < woke + 1_000_000_000 {
            std::thread::yield_now();
            ran = ran_at.load(AO::Acquire);
        }
        (
            ran.saturating_sub(at) as f64 / 1e9,
            woke.saturating_sub(at) as f64 / 1e9,
        )
    })
}

/// Bench probe: the OS floor under [`_timer_probe`]'s lateness, `samples`
/// bare condition-variable waits of `delay` seconds on a thread with the
/// timer thread's slack; how late each woke, in seconds.
#[pyfunction]
pub fn _os_wait_probe(py: Python<'_>, delay: f64, samples: usize) -> Vec<f64> {
    let delay_ns = timer::secs_to_ns(delay);
    gil::detach(py, move || timer::os_wait_lateness(delay_ns, samples))
        .into_iter()
        .map(|ns| ns as f64 / 1e9)
        .collect()
}

/// Test hook: attach a Rust action that panics at expiry.
#[pyfunction]
pub fn _timer_add_panicking_action(deadline: &Bound<'_, Deadline>) {
    let entry = deadline.get().entry();
    let _ = entry.try_add_action(Box::new(|| {
        panic!("taut test: a deliberately panicking timer action")
    }));
}
