//! Cheap state changes of a `taut.Future` without a Condition or callbacks,
//! made by the worker in Rust.
//!
//! The Python fast paths of that class change the state under the module's
//! `_state_lock` (a plain lock, never held across Python code that could
//! wait for this thread); we take the same lock without blocking, with the
//! GIL held. `wait()`/`as_completed()` waiters create the Condition and
//! callback registrations add to `_callbacks`, both under that lock;
//! `result()` waiters add a held gate to `_result_gates` under it, and
//! whoever finishes the future releases the gates it takes from there. So a
//! future without a Condition and without callbacks has nobody else to
//! notify. Anything else (lock busy, a Condition, callbacks, an unexpected
//! state) is left to the Python loop, which calls the future's own methods.
//!
//! Nothing done while holding the lock runs Python code, allocates a Python
//! object (on CPython 3.11 an allocation can run the garbage collector, whose
//! finalizers could then want the lock this thread holds) or lets go of the
//! GIL: only attribute reads and writes on a plain instance, the C methods of
//! a `_thread.lock`, and the pool's own Rust state.

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::py_pool::Names;

/// `_state_lock`'s bound `acquire` and `release`, and the arguments of a
/// non-blocking acquire, kept per thread: looking the methods up and
/// building the arguments on each use cost more than the state change they
/// guard.
struct StateLockMethods {
    lock: Py<PyAny>,
    acquire: Py<PyAny>,
    release: Py<PyAny>,
    no_wait: Py<PyTuple>,
}

thread_local! {
    static STATE_LOCK_METHODS: RefCell<Option<StateLockMethods>> = const { RefCell::new(None) };
}

/// `taut._future._state_lock`, taken without blocking for a run of quiet
/// state changes and let go when done (or dropped). A worker that finishes
/// one call and starts the next in the same step takes it once for both:
/// each take and release is a good part of a short call's cost.
pub(crate) struct StateLock<'py> {
    py: Python<'py>,
    names: &'py Names,
    /// `release` of the lock while this thread holds it.
    held: Option<Bound<'py, PyAny>>,
}

impl<'py> StateLock<'py> {
    pub(crate) fn new(py: Python<'py>, names: &'py Names) -> Self {
        StateLock {
            py,
            names,
            held: None,
        }
    }

    /// Runs `change` holding the lock, taking it first if needed; None if
    /// another thread holds it.
    fn run<T>(&mut self, change: impl FnOnce() -> PyResult<Option<T>>) -> PyResult<Option<T>> {
        if self.held.is_none() {
            self.held = self.try_take()?;
            if self.held.is_none() {
                return Ok(None);
            }
        }
        change()
    }

    /// Take the lock if it is free; its bound `release` if taken.
    fn try_take(&self) -> PyResult<Option<Bound<'py, PyAny>>> {
        let (py, names) = (self.py, self.names);
        // Looked up on each use: a forked child replaces the lock.
        let lock = names
            .future_module
            .bind(py)
            .getattr(names.state_lock.bind(py))?;
        let (acquire, release, no_wait) = STATE_LOCK_METHODS.with(|cell| -> PyResult<_> {
            let mut cached = cell.borrow_mut();
            if cached.as_ref().is_none_or(|c| !c.lock.bind(py).is(&lock)) {
                *cached = Some(StateLockMethods {
                    lock: lock.clone().unbind(),
                    acquire: lock.getattr(names.acquire.bind(py))?.unbind(),
                    release: lock.getattr(names.release.bind(py))?.unbind(),
                    no_wait: PyTuple::new(py, [false])?.unbind(),
                });
            }
            let methods = cached.as_ref().expect("filled above");
            Ok((
                methods.acquire.clone_ref(py),
                methods.release.clone_ref(py),
                methods.no_wait.clone_ref(py),
            ))
        })?;
        let taken = acquire.bind(py).call(no_wait.bind(py), None)?.is_truthy()?;
        Ok(taken.then(|| release.into_bound(py)))
    }

    /// Let go of the lock if this thread holds it.
    pub(crate) fn let_go(&mut self) -> PyResult<()> {
        if let Some(release) = self.held.take() {
            release.call0()?;
        }
        Ok(())
    }
}

impl Drop for StateLock<'_> {
    fn drop(&mut self) {
        // An error path left it held. Releasing a lock this thread holds
        // does not fail.
        let _ = self.let_go();
    }
}

fn is_pending(names: &Names, future: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = future.py();
    Ok(future
        .getattr(names.state.bind(py))?
        .is(names.pending.bind(py)))
}

/// PENDING -> RUNNING for a future nobody waits on; false if that needs
/// the future's own method (waiters, cancelled, lock busy).
pub(crate) fn start_quietly(
    names: &Names,
    future: &Bound<'_, PyAny>,
    lock: &mut StateLock<'_>,
) -> PyResult<bool> {
    let py = future.py();
    // A Condition, once made, stays: read without the lock.
    let cond = future.getattr(names.cond.bind(py))?;
    if !cond.is_none() {
        lock.let_go()?;
        return start_under_condition(names, future, &cond);
    }
    let started = lock.run(|| {
        // A Condition made meanwhile (under the lock) means waiters: the
        // future's own method then.
        if !future.getattr(names.cond.bind(py))?.is_none() || !is_pending(names, future)? {
            return Ok(None);
        }
        future.setattr(names.state.bind(py), names.running.bind(py))?;
        Ok(Some(()))
    })?;
    Ok(started.is_some())
}

/// Someone waits on the future (its Condition exists): from then on its
/// state changes under the Condition's lock, and PENDING -> RUNNING
/// notifies nobody, so taking that lock (without blocking) is all
/// `set_running_or_notify_cancel` would do. This is the case of a call that
/// `wait()` or `as_completed()` waits on before it starts. (Not under the
/// state lock: looking the lock's methods up makes new Python objects.)
fn start_under_condition(
    names: &Names,
    future: &Bound<'_, PyAny>,
    cond: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let py = future.py();
    // taut's own FutureCondition is that lock (a `_thread.RLock`, whose
    // `acquire`/`release` are C code); a `threading.Condition` set by hand
    // holds it in `_lock`.
    let cond_lock = if cond.get_type().is(names.future_condition.bind(py)) {
        cond.clone()
    } else {
        cond.getattr(names.cond_lock.bind(py))?
    };
    if !cond_lock
        .call_method1(names.acquire.bind(py), (false,))?
        .is_truthy()?
    {
        return Ok(false);
    }
    let started = is_pending(names, future).and_then(|pending| {
        if pending {
            future.setattr(names.state.bind(py), names.running.bind(py))?;
        }
        Ok(pending)
    });
    cond_lock.call_method0(names.release.bind(py))?;
    started
}

/// The threads parked in a finished future's `result()`, for
/// [`release_gates`] once the state lock is let go: None, or a list.
pub(crate) type Gates<'py> = Bound<'py, PyAny>;

/// Store the outcome of a future that has no Condition (no `wait()` or
/// `as_completed()` waiter) and no done callbacks; the gates of the threads
/// parked in its `result()`, to release with [`release_gates`], or None if
/// that needs `set_result`/`set_exception`.
pub(crate) fn finish_quietly<'py>(
    names: &Names,
    future: &Bound<'py, PyAny>,
    ok: bool,
    value: &Bound<'py, PyAny>,
    lock: &mut StateLock<'py>,
) -> PyResult<Option<Gates<'py>>> {
    let py = future.py();
    let field = if ok {
        names.result.bind(py)
    } else {
        names.exception.bind(py)
    };
    lock.run(|| {
        let quiet = future.getattr(names.cond.bind(py))?.is_none()
            && future
                .getattr(names.state.bind(py))?
                .is(names.running.bind(py))
            && {
                let callbacks = future.getattr(names.callbacks.bind(py))?;
                callbacks.is_none() || callbacks.len()? == 0
            };
        if !quiet {
            return Ok(None);
        }
        future.setattr(field, value)?;
        future.setattr(names.state.bind(py), names.finished.bind(py))?;
        // Threads parked in result()/exception(): taken under the lock
        // (see `Future._wait_until_done`), woken by the caller.
        let gates = future.getattr(names.result_gates.bind(py))?;
        if !gates.is_none() {
            future.setattr(names.result_gates.bind(py), py.None())?;
        }
        Ok(Some(gates))
    })
}

/// Wake the threads parked in `result()` (see [`finish_quietly`]). Not
/// under the state lock: a bound method is a new Python object.
pub(crate) fn release_gates(names: &Names, gates: &Gates<'_>) -> PyResult<()> {
    if gates.is_none() {
        return Ok(());
    }
    for gate in gates.try_iter()? {
        // A `_thread.lock` held by its waiter: `release` is C code.
        gate?.call_method0(names.release.bind(gates.py()))?;
    }
    Ok(())
}
