//! `ScopeCore`: the state of a deadline scope (`taut.DeadlineScope`, its
//! Python subclass) and the usual entry and exit, each one Rust call.
//!
//! A gateway enters a scope per request, and almost every one ends in time.
//! Written in Python, that entry and exit cost about as much as
//! `asyncio.timeout`'s on CPython 3.12+ (a Python frame each for the
//! factory's `__init__`, `__aenter__` and `__aexit__`, and a store per field).
//! Here the fields live in Rust, and `__enter__`/`__aenter__`/`__exit__`/
//! `__aexit__` do the common case themselves: a relative deadline on the
//! real clock, entered once, no interrupt, exited in time and in order.
//! Everything else (an absolute deadline, a fake clock, `interrupt=True`,
//! misnesting, expiry, a loop seen for the first time) goes to the Python
//! subclass's general path, which reads and writes the same fields.
//!
//! No Python bytecode runs on the fast paths, only C functions (a context
//! variable's `get`/`set`/`reset`, `asyncio`'s running loop and task, a
//! `Task`'s `cancelling()`, the loop channel's `arm`): so neither a signal
//! handler's interrupt nor an asynchronous exception can land half-way
//! through. The Python general path is protected by code object instead
//! (`taut._signal_interrupt.protect`).

use std::ptr;
use std::sync::OnceLock;

use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyList, PyListMethods, PyString, PyTuple, PyType, PyWeakrefMethods, PyWeakrefReference,
};
use pyo3::PyTraverseError;

use crate::py_clamp::{_seconds, clamp_timeout, describe};
use crate::py_loop::LoopChannel;
use crate::py_timer::{monotonic, Deadline};

/// Below this a relative deadline takes the general path: `now + seconds`
/// could round to `now`, an expiry at entry the fast path does not handle.
const SMALLEST_FAST_SECONDS: f64 = 1e-6;

/// What the fast paths call, handed over once by `taut.deadline._scope` at
/// import (with the GIL held: a cell filled later, with the GIL released for
/// a moment, could be left locked in a forked child).
struct Setup {
    /// The `get`, `set` and `reset` methods of `taut.deadline._context.innermost`,
    /// the innermost scope's context variable, bound once (a method looked
    /// up per call is a new object each time).
    innermost_get: Py<PyAny>,
    innermost_set: Py<PyAny>,
    innermost_reset: Py<PyAny>,
    /// `taut._loop_waker.last_seen`: its one item names the loop a scope
    /// last armed on. (An item of a list held here: a module global would
    /// cost a dict lookup per scope.)
    last_seen: Py<PyList>,
    /// `asyncio._get_running_loop` and `taut.deadline._tasks.task_of` (a
    /// loop's running task), both C functions; None if either is written
    /// in Python (no C accelerator for asyncio): then no fast paths.
    get_running_loop: Option<Py<PyAny>>,
    task_of: Option<Py<PyAny>>,
    /// `asyncio.Task` as asyncio's C accelerator makes it: only such a
    /// task's `cancelling()` is sure to run no bytecode.
    c_task: Py<PyAny>,
    /// `time.monotonic`: the fast paths run only under the real clock.
    monotonic: Py<PyAny>,
    /// `taut.deadline._clock.current`: its one item is the clock a new
    /// scope reads (a list's item, as `last_seen`).
    clock: Py<PyList>,
    /// `taut.DeadlineScope`, the class `fail_after` and `move_on_after` make.
    scope_type: Py<PyType>,
    /// `Task.cancelling` of that C task, unbound (called with the task: no
    /// bound method is made per call), where tasks count cancellations
    /// (3.11+).
    task_cancelling: Option<Py<PyAny>>,
    /// Whether asyncio's running-loop lookup is cheaper than reading the
    /// loop's `_thread_id` (3.12+: no `getpid()` system call in it).
    cheap_running_loop: bool,
    names: Names,
}

struct Names {
    thread_id: Py<PyString>,
    enter_slow: Py<PyString>,
    aenter_slow: Py<PyString>,
    exit_slow: Py<PyString>,
    finish_exit: Py<PyString>,
    aexit_slow: Py<PyString>,
}

static SETUP: OnceLock<Setup> = OnceLock::new();

fn setup() -> PyResult<&'static Setup> {
    SETUP
        .get()
        .ok_or_else(|| PyRuntimeError::new_err("taut.deadline._scope was not imported"))
}

/// Hand the fast paths what they call (see [`Setup`]). Once per process.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn _scope_setup(
    py: Python<'_>,
    innermost: &Bound<'_, PyAny>,
    last_seen: Py<PyList>,
    get_running_loop: Option<Py<PyAny>>,
    task_of: Option<Py<PyAny>>,
    c_task: Py<PyAny>,
    monotonic: Py<PyAny>,
    clock: Py<PyList>,
    scope_type: Py<PyType>,
    has_cancelling: bool,
) -> PyResult<()> {
    let name = |s: &str| PyString::intern(py, s).unbind();
    let _ = SETUP.set(Setup {
        innermost_get: innermost.getattr("get")?.unbind(),
        innermost_set: innermost.getattr("set")?.unbind(),
        innermost_reset: innermost.getattr("reset")?.unbind(),
        last_seen,
        get_running_loop,
        task_of,
        task_cancelling: if has_cancelling {
            c_task
                .bind(py)
                .getattr("cancelling")
                .ok()
                .map(Bound::unbind)
        } else {
            None
        },
        c_task,
        cheap_running_loop: py.version_info() >= (3, 12),
        monotonic,
        clock,
        scope_type,
        names: Names {
            thread_id: name("_thread_id"),
            enter_slow: name("_enter_slow"),
            aenter_slow: name("_aenter_slow"),
            exit_slow: name("_exit"),
            finish_exit: name("_finish_exit"),
            aexit_slow: name("_aexit_slow"),
        },
    });
    Ok(())
}

/// The fields of a deadline scope; `taut.DeadlineScope` adds the behaviour.
/// Python names as the subclass uses them; the ones set at entry read as
/// zero or None before it.
#[pyclass(subclass, weakref, module = "taut._core")]
pub struct ScopeCore {
    #[pyo3(get, set, name = "_relative")]
    relative: Option<f64>,
    #[pyo3(get, set, name = "_absolute")]
    absolute: Option<f64>,
    #[pyo3(get, set, name = "_raise")]
    raise_on_expiry: bool,
    #[pyo3(get, set)]
    label: Py<PyAny>,
    #[pyo3(get, set, name = "_interrupt")]
    interrupt: bool,
    #[pyo3(get, set, name = "_clock")]
    clock: Py<PyAny>,
    #[pyo3(get, set, name = "_at")]
    at: Option<f64>,
    /// `_deadline` (a getter and setter below: the fast entry keeps it as
    /// a plain Rust value, and the Python object is made only if asked for).
    deadline: Option<ArmedDeadline>,
    #[pyo3(get, set, name = "_entered")]
    entered: bool,
    #[pyo3(get, set, name = "_closed")]
    closed: bool,
    #[pyo3(get, set, name = "_abandoned")]
    abandoned: bool,
    #[pyo3(get, set, name = "_expired")]
    expired: Option<bool>,
    #[pyo3(get, set, name = "_task")]
    task: Option<Py<PyAny>>,
    #[pyo3(get, set, name = "_cancel_requested")]
    cancel_requested: bool,
    #[pyo3(get, set, name = "_signal_armed")]
    signal_armed: bool,
    #[pyo3(get, set, name = "_cancelling")]
    cancelling: i64,
    /// The earliest deadline of this scope and of the enclosing ones on the
    /// same clock, up to `outer`.
    #[pyo3(get, set, name = "_effective")]
    effective: Option<f64>,
    #[pyo3(get, set, name = "_parent")]
    parent: Option<Py<PyAny>>,
    /// The nearest enclosing scope on another clock (a real scope around
    /// `taut.testing.scope_clock()`, say), which bounds this one on its
    /// own clock: deadlines of two clocks are never compared.
    #[pyo3(get, set, name = "_outer")]
    outer: Option<Py<PyAny>>,
    #[pyo3(get, set, name = "_start")]
    start: f64,
    #[pyo3(get, set, name = "_token")]
    token: Option<Py<PyAny>>,
    #[pyo3(get, set, name = "_interrupt_raised")]
    interrupt_raised: bool,
    #[pyo3(get, set, name = "_thread")]
    thread: u64,
    #[pyo3(get, set, name = "_frame")]
    frame: Option<Py<PyAny>>,
    /// An interrupt scope's entering greenlet, as the first frame of its
    /// stack (None without greenlets): see `DeadlineScope._interrupt_block`.
    #[pyo3(get, set, name = "_stack_root")]
    stack_root: Option<Py<PyAny>>,
}

/// A scope's armed deadline. A gateway's scope ends in time and nothing in
/// Python ever looks at its deadline: making and freeing a `Deadline`
/// object for it would be about a twentieth of the whole scope's cost.
enum ArmedDeadline {
    /// Armed by the fast entry; no Python object yet.
    Inline(Deadline),
    /// Set from Python, or asked for by it (then kept, so that every read
    /// of `_deadline` is the same object).
    Object(Py<Deadline>),
}

impl ArmedDeadline {
    /// Another handle on the same timer entry, to use with the scope's
    /// borrow let go (cancelling may run Python: a signal handler).
    fn handle(&self, py: Python<'_>) -> Deadline {
        match self {
            ArmedDeadline::Inline(deadline) => deadline.share(),
            ArmedDeadline::Object(deadline) => deadline.bind(py).get().share(),
        }
    }
}

/// An `await` that is over at once with `value`: what the fast `__aenter__`
/// returns (`async with` needs an awaitable; a coroutine would cost a frame).
/// Its own iterator, as `yield from awaitable.__await__()` needs. From a
/// free list: one is made and freed per request in a gateway.
#[pyclass(frozen, freelist = 16, module = "taut._core")]
pub struct Ready {
    value: Py<PyAny>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Ends at once with the value: StopIteration(value) is set as the
    /// error here, and None makes pyo3 return NULL leaving it set (an
    /// iterator that returns NULL with StopIteration set has ended with its
    /// value). Cheaper than returning the error through pyo3, which keeps
    /// it as a `PyErr` and sets it again.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<()>> {
        let stop = call_one(
            py.get_type::<PyStopIteration>().as_any(),
            self.value.bind(py),
        )?;
        // SAFETY: attached (a `Python` token in hand); PyErr_Restore takes
        // over the new references given to it.
        unsafe {
            ffi::Py_INCREF(ffi::PyExc_StopIteration);
            ffi::PyErr_Restore(ffi::PyExc_StopIteration, stop.into_ptr(), ptr::null_mut());
        }
        Ok(None)
    }
}

/// An `await` that is over at once with None: the fast `__aexit__`'s (the
/// exception, if any, is not swallowed). Stateless, so one serves every exit.
#[pyclass(frozen, module = "taut._core")]
pub struct Done;

#[pymethods]
impl Done {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Ends at once, and with None rather than False: an iterator that
    /// returns NULL with no exception set is exhausted, and `await` reads
    /// that as `return None` (CPython 3.9+, `_PyGen_FetchStopIterationValue`).
    /// No StopIteration is made, raised and caught: about a tenth of the
    /// whole scope's cost on 3.12+. `async with` only asks whether the
    /// result is true; None and False both let the exception through.
    fn __next__(&self) -> Option<()> {
        None
    }
}

static DONE: OnceLock<Py<Done>> = OnceLock::new();

/// The defaults of the factories' arguments: None, "operation", False, True.
static DEFAULTS: OnceLock<[Py<PyAny>; 4]> = OnceLock::new();

/// Made at module import, with the GIL held (see [`Setup`]).
pub fn init(py: Python<'_>) -> PyResult<()> {
    if DONE.get().is_none() {
        let _ = DONE.set(Py::new(py, Done)?);
    }
    if DEFAULTS.get().is_none() {
        let _ = DEFAULTS.set([
            py.None(),
            PyString::new(py, "operation").into_any().unbind(),
            PyBool::new(py, false).to_owned().into_any().unbind(),
            PyBool::new(py, true).to_owned().into_any().unbind(),
        ]);
    }
    Ok(())
}

/// Default argument `index` of [`DEFAULTS`], as pyo3 asks for one: a
/// reference, made without a `Python` token in hand.
fn default_argument<'py>(index: usize) -> &'py Bound<'py, PyAny> {
    // SAFETY: pyo3 calls a default only while extracting the arguments of a
    // call from Python, so this thread is attached.
    let py = unsafe { Python::assume_attached() };
    // `init` ran when the module was made, before any call could come.
    DEFAULTS.get().expect("taut._core initialised")[index].bind(py)
}

fn none<'py>() -> &'py Bound<'py, PyAny> {
    default_argument(0)
}

fn operation<'py>() -> &'py Bound<'py, PyAny> {
    default_argument(1)
}

fn false_<'py>() -> &'py Bound<'py, PyAny> {
    default_argument(2)
}

fn true_<'py>() -> &'py Bound<'py, PyAny> {
    default_argument(3)
}

/// A flag argument: a bool, nothing else (`1` would be taken silently, and
/// pyo3's own refusal names no parameter in its first line).
fn check_flag(value: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    if !value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a bool, got {}",
            describe(value, 80)?
        )));
    }
    value.is_truthy()
}

/// The arguments every scope factory shares, checked and named: its
/// relative deadline, label and interrupt. Class tests (a scope is made
/// per request); an error names the argument and the value.
fn check_arguments(
    seconds: &Bound<'_, PyAny>,
    label: &Bound<'_, PyAny>,
    interrupt: &Bound<'_, PyAny>,
) -> PyResult<(Option<f64>, Py<PyAny>, bool)> {
    let relative = clamp_timeout(seconds, "seconds")?;
    let interrupt = check_flag(interrupt, "interrupt")?;
    if !label.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "label must be a str, got {}",
            describe(label, 80)?
        )));
    }
    // A str subclass is kept as plain text: its own methods (a __format__ or
    // __repr__ that raises) must never run later, in the expiry's message, a
    // repr, or the program's own use of `scope.label`. PyUnicode_FromObject
    // copies the characters into an exact str without calling any of them.
    let label = if label.is_exact_instance_of::<PyString>() {
        label.clone()
    } else {
        // SAFETY: `label` is a live str (subclass) object and the GIL is held;
        // the call returns a new reference or NULL with an exception set.
        unsafe {
            Bound::from_owned_ptr_or_err(label.py(), ffi::PyUnicode_FromObject(label.as_ptr()))?
        }
    };
    Ok((relative, label.unbind(), interrupt))
}

/// A `taut.DeadlineScope` `seconds` from its entry: made blank (no
/// arguments to parse) and filled in here, so that a gateway's scope per
/// request costs no Python frame for its factory (that frame was about a
/// sixteenth of the scope's whole cost on 3.12+).
fn relative_scope(
    seconds: &Bound<'_, PyAny>,
    label: &Bound<'_, PyAny>,
    interrupt: &Bound<'_, PyAny>,
    raise_on_expiry: bool,
) -> PyResult<Py<PyAny>> {
    let py = seconds.py();
    let (relative, label, interrupt) = check_arguments(seconds, label, interrupt)?;
    let scope = setup()?.scope_type.bind(py).call0()?;
    {
        let mut core = scope.cast::<ScopeCore>()?.try_borrow_mut()?;
        core.relative = relative;
        core.raise_on_expiry = raise_on_expiry;
        core.label = label;
        core.interrupt = interrupt;
    }
    Ok(scope.unbind())
}

/// A scope that raises ``DeadlineExpired`` on exit if ``seconds`` (counted
/// from entry; clamped by ``clamp_timeout``; ``None`` = unbounded; ``<= 0``
/// = already expired) passed; inside an asyncio task it cancels the task at
/// expiry. ``interrupt=True`` (``with`` outside a task only) raises it inside
/// the block at expiry: on the main thread even inside a blocking call, on
/// other threads at the next bytecode (see ``taut.deadline``).
#[pyfunction]
#[pyo3(
    signature = (seconds, label = operation(), *, interrupt = false_()),
    text_signature = "(seconds, label='operation', *, interrupt=False)"
)]
pub fn fail_after(
    seconds: &Bound<'_, PyAny>,
    label: &Bound<'_, PyAny>,
    interrupt: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    relative_scope(seconds, label, interrupt, true)
}

/// Like ``fail_after`` but exits quietly; ``scope.expired`` tells.
#[pyfunction]
#[pyo3(
    signature = (seconds, label = operation(), *, interrupt = false_()),
    text_signature = "(seconds, label='operation', *, interrupt=False)"
)]
pub fn move_on_after(
    seconds: &Bound<'_, PyAny>,
    label: &Bound<'_, PyAny>,
    interrupt: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    relative_scope(seconds, label, interrupt, false)
}

/// The running loop (None outside one), and its wake-up channel if the
/// fast paths may arm through it.
type RunningLoop<'py> = (Option<Bound<'py, PyAny>>, Option<Bound<'py, LoopChannel>>);

/// `taut.deadline._tasks.task_of`, once `fast_seconds` said it is there.
fn task_of(s: &Setup) -> PyResult<&Py<PyAny>> {
    s.task_of
        .as_ref()
        .ok_or_else(|| PyRuntimeError::new_err("no C task_of: the general path applies"))
}

/// `callable(arg)` without the argument tuple a `call1` makes under the
/// limited API (the C functions called here take one argument).
fn call_one<'py>(
    callable: &Bound<'py, PyAny>,
    arg: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = callable.py();
    // SAFETY: both pointers are live objects (borrowed for the call), the
    // argument list ends with NULL as the variadic API requires, and the
    // result is a new reference or NULL with an exception set.
    unsafe {
        let result = ffi::PyObject_CallFunctionObjArgs(
            callable.as_ptr(),
            arg.as_ptr(),
            std::ptr::null_mut::<ffi::PyObject>(),
        );
        Bound::from_owned_ptr_or_err(py, result)
    }
}

/// This OS thread's identity, as the scopes' fast paths record it: what
/// `threading.get_ident()` answers, unless gevent's or eventlet's
/// monkey-patching made that name greenlets (one OS thread runs them all).
#[pyfunction]
pub fn _os_thread_ident() -> u64 {
    current_thread()
}

/// This thread's `threading.get_ident()` (unpatched: see `_os_thread_ident`).
fn current_thread() -> u64 {
    // SAFETY: a plain C call with no preconditions.
    let ident = unsafe { ffi::PyThread_get_thread_ident() };
    // A c_ulong: 32 bits on some platforms, 64 here.
    #[allow(clippy::useless_conversion)]
    u64::from(ident)
}

/// What `ScopeCore.__new__` takes again to remake a scope (`__reduce__`).
type ReduceArgs = (Option<f64>, Option<f64>, bool, Py<PyAny>, bool);

/// How a fast entry arms its deadline.
enum Arming<'py> {
    /// Outside a task: a plain deadline; the scope raises on exit.
    Plain,
    /// In `task`: the loop's channel wakes the loop to cancel it.
    InTask {
        task: Bound<'py, PyAny>,
        channel: Bound<'py, LoopChannel>,
    },
}

impl ScopeCore {
    /// The relative deadline, if this scope can take the fast entry.
    fn fast_seconds(&self, py: Python<'_>, s: &Setup) -> Option<f64> {
        if self.entered || self.interrupt || self.absolute.is_some() {
            return None;
        }
        if s.get_running_loop.is_none() || s.task_of.is_none() {
            return None;
        }
        if !self.clock.bind(py).is(s.monotonic.bind(py)) {
            return None;
        }
        self.relative.filter(|&r| r >= SMALLEST_FAST_SECONDS)
    }

    /// The running loop, and its channel when `_loop_waker.last_seen` holds
    /// that loop with a channel (a loop seen for the first time, or one
    /// without readers, takes the general path: it runs Python).
    /// `trust_thread_id`: as `__aenter__` in Python, believe the loop's own
    /// `_thread_id` where `last_seen` says so (before 3.12 asyncio's lookup
    /// makes a system call).
    fn running_loop<'py>(
        py: Python<'py>,
        s: &Setup,
        trust_thread_id: bool,
    ) -> PyResult<RunningLoop<'py>> {
        let last = s.last_seen.bind(py).get_item(0)?;
        let last = last.cast_into::<PyTuple>()?;
        // A weak reference, or None: read in C, not called.
        let remembered = last
            .get_item(0)?
            .cast::<PyWeakrefReference>()
            .ok()
            .and_then(|r| r.upgrade());
        // A weak reference too (see `_loop_waker.last_seen`), or None.
        let channel = last
            .get_item(3)?
            .cast::<PyWeakrefReference>()
            .ok()
            .and_then(|r| r.upgrade())
            .and_then(|c| c.cast_into::<LoopChannel>().ok());
        if let Some(remembered) = &remembered {
            if trust_thread_id && !s.cheap_running_loop && last.get_item(2)?.is_truthy()? {
                let owner = remembered.getattr(s.names.thread_id.bind(py))?;
                if !owner.is_none() && owner.extract::<u64>()? == current_thread() {
                    return Ok((Some(remembered.clone()), channel));
                }
            }
        }
        let Some(get_running_loop) = &s.get_running_loop else {
            return Ok((None, None));
        };
        let running = get_running_loop.bind(py).call0()?;
        if running.is_none() {
            return Ok((None, None));
        }
        let same = remembered.is_some_and(|l| l.is(&running));
        Ok((Some(running), if same { channel } else { None }))
    }

    /// The fast entry of `slf` with a deadline `seconds` from now, or false
    /// (nothing changed) if it must take the general path.
    fn enter_fast(
        slf: &Bound<'_, Self>,
        s: &Setup,
        seconds: f64,
        arming: Arming<'_>,
    ) -> PyResult<bool> {
        let py = slf.py();
        let parent = s.innermost_get.bind(py).call0()?;
        // (The parent's effective deadline on this clock, the scope on
        // another clock beyond.)
        let (same_clock, other_clock) = if parent.is_none() {
            (None, None)
        } else {
            let Ok(core) = parent.cast::<ScopeCore>() else {
                return Ok(false);
            };
            let core = core.try_borrow()?;
            if core.abandoned {
                return Ok(false); // the bounding scope is further out
            }
            if core.clock.bind(py).is(s.monotonic.bind(py)) {
                (core.effective, core.outer.as_ref().map(|o| o.clone_ref(py)))
            } else {
                (None, Some(parent.clone().unbind()))
            }
        };
        let cancelling = match (&arming, &s.task_cancelling) {
            (Arming::InTask { task, .. }, Some(cancelling)) => {
                call_one(cancelling.bind(py), task)?.extract::<i64>()?
            }
            _ => 0,
        };
        let now = monotonic();
        let at = now + seconds;
        {
            let mut scope = slf.try_borrow_mut()?;
            scope.thread = current_thread();
            scope.entered = true;
            scope.start = now;
            scope.at = Some(at);
            scope.effective = Some(same_clock.map_or(at, |o| o.min(at)));
            scope.outer = other_clock;
            scope.parent = (!parent.is_none()).then(|| parent.unbind());
            scope.cancelling = cancelling;
        }
        let deadline = match arming {
            Arming::Plain => Deadline::arm(at)?,
            Arming::InTask { task, channel } => {
                slf.try_borrow_mut()?.task = Some(task.unbind());
                let target = slf.clone().into_any().unbind();
                channel.get().arm(py, at, target)?
            }
        };
        slf.try_borrow_mut()?.deadline = Some(ArmedDeadline::Inline(deadline));
        let token = call_one(s.innermost_set.bind(py), slf.as_any())?;
        slf.try_borrow_mut()?.token = Some(token.unbind());
        Ok(true)
    }

    /// The fast exit of `slf`: true if it was in time and properly nested,
    /// and is now closed; false (at most its deadline cancelled, which the
    /// general path then reads as expired) otherwise.
    fn exit_fast(slf: &Bound<'_, Self>, s: &Setup) -> PyResult<bool> {
        let py = slf.py();
        let (deadline, token, parent) = {
            let scope = slf.try_borrow()?;
            // Another thread (even in a copy of the context, where the
            // scope is the innermost one too) is refused on the general path.
            let usual = !scope.interrupt
                && !scope.closed
                && !scope.cancel_requested
                && scope.thread == current_thread()
                && scope.clock.bind(py).is(s.monotonic.bind(py));
            match (&scope.deadline, &scope.token) {
                (Some(deadline), Some(token)) if usual => (
                    deadline.handle(py),
                    token.clone_ref(py),
                    scope.parent.as_ref().map(|p| p.clone_ref(py)),
                ),
                _ => return Ok(false),
            }
        };
        if !s.innermost_get.bind(py).call0()?.is(slf) {
            return Ok(false);
        }
        if !deadline.cancel_in_time(py)? {
            return Ok(false);
        }
        {
            let mut scope = slf.try_borrow_mut()?;
            scope.expired = Some(false);
            scope.closed = true;
        }
        if let Err(err) = call_one(s.innermost_reset.bind(py), token.bind(py)) {
            if !err.is_instance_of::<PyValueError>(py) {
                return Err(err);
            }
            // Exited in a copy of the context it was entered in: the
            // entering context still names this scope, so it is abandoned
            // there (skipped, as `DeadlineScope._restore` explains).
            slf.try_borrow_mut()?.abandoned = true;
            s.innermost_set.bind(py).call1((parent,))?;
        }
        Ok(true)
    }
}

#[pymethods]
impl ScopeCore {
    /// `seconds` is checked here (`clamp_timeout`, named "seconds"):
    /// `fail_at` passes None. `absolute` as `fail_at` checks its deadline
    /// (`check_deadline`: beyond the float range only its sign matters; the
    /// entry clamps the distance from now): the class is public, and an
    /// `OverflowError` from the conversion named nothing. With no
    /// arguments, an unbounded scope that raises (what `fail_after` fills in).
    #[new]
    #[pyo3(
        signature = (seconds = none(), absolute = none(), raise_on_expiry = true_(), label = operation(), interrupt = false_()),
        text_signature = "(seconds=None, absolute=None, raise_on_expiry=True, label='operation', interrupt=False)"
    )]
    fn new(
        py: Python<'_>,
        seconds: &Bound<'_, PyAny>,
        absolute: &Bound<'_, PyAny>,
        raise_on_expiry: &Bound<'_, PyAny>,
        label: &Bound<'_, PyAny>,
        interrupt: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let absolute = _seconds(absolute, "absolute")?.filter(|at| *at != f64::INFINITY);
        let raise_on_expiry = check_flag(raise_on_expiry, "raise_on_expiry")?;
        // The blank scope `fail_after` fills in (its own arguments checked
        // there): the defaults themselves need no checking.
        let blank = seconds.is_none() && label.is(operation()) && interrupt.is(false_());
        let (relative, label, interrupt) = if blank {
            (None, label.clone().unbind(), false)
        } else {
            check_arguments(seconds, label, interrupt)?
        };
        let s = setup()?;
        let clock = s.clock.bind(py).get_item(0)?;
        Ok(ScopeCore {
            relative,
            absolute,
            raise_on_expiry,
            label,
            interrupt,
            clock: clock.unbind(),
            at: None,
            deadline: None,
            entered: false,
            closed: false,
            abandoned: false,
            expired: None,
            task: None,
            cancel_requested: false,
            signal_armed: false,
            cancelling: 0,
            effective: None,
            parent: None,
            outer: None,
            start: 0.0,
            token: None,
            interrupt_raised: false,
            thread: 0,
            frame: None,
            stack_root: None,
        })
    }

    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let s = setup()?;
        let seconds = slf.try_borrow()?.fast_seconds(py, s);
        if let Some(seconds) = seconds {
            let arming = match Self::running_loop(py, s, false)? {
                (None, _) => Some(Arming::Plain),
                (Some(running), channel) => {
                    let task = call_one(task_of(s)?.bind(py), &running)?;
                    if task.is_none() {
                        Some(Arming::Plain)
                    } else if let (Some(channel), true) =
                        (channel, task.get_type().is(s.c_task.bind(py)))
                    {
                        Some(Arming::InTask { task, channel })
                    } else {
                        None
                    }
                }
            };
            if let Some(arming) = arming {
                if Self::enter_fast(slf, s, seconds, arming)? {
                    return Ok(slf.clone().into_any().unbind());
                }
            }
        }
        Ok(slf.call_method0(s.names.enter_slow.bind(py))?.unbind())
    }

    fn __aenter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let s = setup()?;
        let seconds = slf.try_borrow()?.fast_seconds(py, s);
        if let Some(seconds) = seconds {
            if let (Some(running), Some(channel)) = Self::running_loop(py, s, true)? {
                let task = call_one(task_of(s)?.bind(py), &running)?;
                if task.get_type().is(s.c_task.bind(py))
                    && Self::enter_fast(slf, s, seconds, Arming::InTask { task, channel })?
                {
                    let ready = Ready {
                        value: slf.clone().into_any().unbind(),
                    };
                    return Ok(Py::new(py, ready)?.into_any());
                }
            }
        }
        Ok(slf.call_method0(s.names.aenter_slow.bind(py))?.unbind())
    }

    fn __exit__(
        slf: &Bound<'_, Self>,
        exc_type: &Bound<'_, PyAny>,
        exc: &Bound<'_, PyAny>,
        tb: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let _ = tb; // the general path needs no traceback
        let py = slf.py();
        let s = setup()?;
        if Self::exit_fast(slf, s)? {
            return Ok(PyBool::new(py, false).to_owned().into_any().unbind());
        }
        let exited = slf.call_method1(s.names.exit_slow.bind(py), (exc_type, exc));
        if exited.is_err() {
            // Another signal handler's exception (a Ctrl-C) may have landed
            // before `_exit`'s own guard: finish the exit from here, where no
            // bytecode runs between tries (see `_finish_exit`). One landing
            // in a try is dropped; the first is on its way out.
            for _ in 0..8 {
                if slf.call_method0(s.names.finish_exit.bind(py)).is_ok() {
                    break;
                }
            }
        }
        Ok(exited?.unbind())
    }

    fn __aexit__(
        slf: &Bound<'_, Self>,
        exc_type: &Bound<'_, PyAny>,
        exc: &Bound<'_, PyAny>,
        tb: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let s = setup()?;
        if Self::exit_fast(slf, s)? {
            let done = DONE
                .get()
                .ok_or_else(|| PyRuntimeError::new_err("taut._core was not initialised"))?;
            return Ok(done.clone_ref(py).into_any());
        }
        Ok(slf
            .call_method1(s.names.aexit_slow.bind(py), (exc_type, exc, tb))?
            .unbind())
    }

    #[getter(_deadline)]
    fn deadline_object(&mut self, py: Python<'_>) -> PyResult<Option<Py<Deadline>>> {
        if let Some(ArmedDeadline::Inline(deadline)) = &self.deadline {
            let object = Py::new(py, deadline.share())?;
            self.deadline = Some(ArmedDeadline::Object(object));
        }
        Ok(match &self.deadline {
            Some(ArmedDeadline::Object(deadline)) => Some(deadline.clone_ref(py)),
            _ => None,
        })
    }

    #[setter(_deadline)]
    fn set_deadline_object(&mut self, deadline: Option<Py<Deadline>>) {
        self.deadline = deadline.map(ArmedDeadline::Object);
    }

    /// A scope not entered yet copies and pickles as what made it (as it
    /// did when its fields were Python slots); an entered one has an armed
    /// deadline that no copy may share.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, ReduceArgs)> {
        let py = slf.py();
        let scope = slf.try_borrow()?;
        if scope.entered {
            return Err(PyTypeError::new_err(
                "an entered deadline scope cannot be copied or pickled (its deadline is armed); \
                 make a new one with the same factory",
            ));
        }
        let args = (
            scope.relative,
            scope.absolute,
            scope.raise_on_expiry,
            scope.label.clone_ref(py),
            scope.interrupt,
        );
        Ok((slf.get_type(), args))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.label)?;
        visit.call(&self.clock)?;
        if let Some(ArmedDeadline::Object(deadline)) = &self.deadline {
            visit.call(deadline)?;
        }
        visit.call(&self.task)?;
        visit.call(&self.parent)?;
        visit.call(&self.outer)?;
        visit.call(&self.token)?;
        visit.call(&self.frame)?;
        visit.call(&self.stack_root)?;
        Ok(())
    }

    fn __clear__(&mut self) {
        self.deadline = None;
        self.task = None;
        self.parent = None;
        self.outer = None;
        self.token = None;
        self.frame = None;
        self.stack_root = None;
    }
}
