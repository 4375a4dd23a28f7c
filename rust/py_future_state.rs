//! Cheap state changes of a `taut.Future` without a Condition or callbacks,
//! made by the worker in Rust; and the finish of one that
//! `concurrent.futures.wait()`/`as_completed()` waits on, when telling them
//! is only bookkeeping (see [`finish_waited_quietly`]).
//!
//! The Python fast paths of that class change the state under the module's
//! `_state_lock` (a re-entrant `FutureStateLock`, never held across Python
//! code that could wait for this thread); we take the same lock without
//! blocking, with the GIL held. `wait()`/`as_completed()` waiters create the
//! Condition and callback registrations add to `_callbacks`, both under that
//! lock; `result()` waiters add a held gate to `_result_gates` under it, and
//! whoever finishes the future releases the gates it takes from there. So a
//! future without a Condition and without callbacks has nobody else to
//! notify. Anything else (lock busy, a Condition, callbacks, an unexpected
//! state) is left to the Python loop, which calls the future's own methods.
//!
//! Nothing done while holding the lock runs Python code, allocates a Python
//! object (on CPython 3.11 an allocation can run the garbage collector, whose
//! finalizers would then run in the middle of a change) or lets go of the
//! GIL: only attribute reads and writes on a plain instance, the lock's own
//! Rust methods, the C methods of `_thread.lock` gates, and the pool's own
//! Rust state.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::py_pool::Names;
use crate::py_state_lock::FutureStateLock;

/// `taut._future._state_lock`, taken without blocking for a run of quiet
/// state changes and let go when done (or dropped). A worker that finishes
/// one call and starts the next in the same step takes it once for both.
pub(crate) struct StateLock<'py> {
    py: Python<'py>,
    names: &'py Names,
    /// The lock while this thread holds it through this guard.
    held: Option<Bound<'py, FutureStateLock>>,
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

    /// Take the lock if it is free (or this thread holds it already).
    fn try_take(&self) -> PyResult<Option<Bound<'py, FutureStateLock>>> {
        let (py, names) = (self.py, self.names);
        // Looked up on each use: a forked child replaces the lock.
        let lock = names
            .future_module
            .bind(py)
            .getattr(names.state_lock.bind(py))?
            .cast_into::<FutureStateLock>()?;
        Ok(lock.get().try_enter().then_some(lock))
    }

    /// Let go of the lock if this guard holds it.
    pub(crate) fn let_go(&mut self) {
        if let Some(lock) = self.held.take() {
            lock.get().exit();
        }
    }
}

impl Drop for StateLock<'_> {
    fn drop(&mut self) {
        // An error path left it held.
        self.let_go();
    }
}

fn is_pending(names: &Names, future: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = future.py();
    Ok(future
        .getattr(names.state.bind(py))?
        .is(names.pending.bind(py)))
}

/// PENDING -> RUNNING for a future nobody waits on, or one whose waiters
/// need no notice of it (see [`start_under_condition`]); false if that
/// needs the future's own method (cancelled, a lock busy).
pub(crate) fn start_quietly(
    names: &Names,
    future: &Bound<'_, PyAny>,
    lock: &mut StateLock<'_>,
) -> PyResult<bool> {
    let py = future.py();
    // The Condition is made under the lock: read there (the worker usually
    // holds it already, from finishing the call before), once.
    let mut condition = None;
    let started = lock.run(|| {
        let cond = future.getattr(names.cond.bind(py))?;
        if !cond.is_none() {
            condition = Some(cond);
            return Ok(None);
        }
        if !is_pending(names, future)? {
            return Ok(None);
        }
        future.setattr(names.state.bind(py), names.running.bind(py))?;
        Ok(Some(()))
    })?;
    if let Some(cond) = condition {
        // Once made it stays: from then on the state changes under it.
        lock.let_go();
        return start_under_condition(names, future, &cond);
    }
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
        store_outcome(names, future, ok, value).map(Some)
    })
}

/// With the state lock held: store the outcome of a running future, mark
/// it finished and take the gates of the threads parked in its
/// `result()`/`exception()` (they add them under this lock, see
/// `Future._wait_until_done`), for the caller to release once it lets go.
fn store_outcome<'py>(
    names: &Names,
    future: &Bound<'py, PyAny>,
    ok: bool,
    value: &Bound<'py, PyAny>,
) -> PyResult<Gates<'py>> {
    let py = future.py();
    let field = if ok {
        names.result.bind(py)
    } else {
        names.exception.bind(py)
    };
    future.setattr(field, value)?;
    future.setattr(names.state.bind(py), names.finished.bind(py))?;
    let gates = future.getattr(names.result_gates.bind(py))?;
    if !gates.is_none() {
        future.setattr(names.result_gates.bind(py), py.None())?;
    }
    Ok(gates)
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

/// The standard library's waiters that `finish_waited_quietly` can tell
/// itself (`concurrent.futures._base`, the same in CPython 3.9 to 3.13).
#[derive(Clone, Copy)]
enum WaiterKind {
    /// `wait(return_when=ALL_COMPLETED or FIRST_EXCEPTION)`: told by
    /// appending the future and counting down, until the last one.
    AllCompleted,
    /// `as_completed()`: told by appending the future, while its event is
    /// still set from an earlier one (the consumer has not drained it yet).
    AsCompleted,
}

/// A waiter whose lock this thread holds, with what telling it needs, all
/// read before the future changes: `finished_futures` and, for `wait()`,
/// the count of calls still pending.
struct HeldWaiter<'py> {
    waiter: Bound<'py, PyAny>,
    lock: Bound<'py, PyAny>,
    /// Always there once `tell_quietly` said yes.
    finished_futures: Option<Bound<'py, PyList>>,
    pending: Option<i64>,
}

/// Finish a future that `concurrent.futures.wait()` or `as_completed()`
/// waits on (it has a `FutureCondition`), when telling its waiters is only
/// bookkeeping: every waiter is one of the standard library's two classes
/// above and none needs its event set by this outcome, nobody waits in the
/// Condition's own `wait()`, and there are no done callbacks. Their methods
/// would be Python run by the worker for every call of a `wait()` over
/// many futures: this does what they would, with the Condition's and each
/// waiter's lock taken without blocking. Everything is read and checked
/// before the future changes, and anything unexpected (a lock busy, a
/// field missing) leaves it all to the future's own
/// `set_result`/`set_exception`: None, nothing changed. Otherwise the
/// gates of threads parked in `result()`, to release with
/// [`release_gates`]. Call with `lock` not held.
pub(crate) fn finish_waited_quietly<'py>(
    names: &Names,
    future: &Bound<'py, PyAny>,
    ok: bool,
    value: &Bound<'py, PyAny>,
    lock: &mut StateLock<'py>,
) -> PyResult<Option<Gates<'py>>> {
    let py = future.py();
    let cond = future.getattr(names.cond.bind(py))?;
    if !cond.get_type().is(names.future_condition.bind(py)) {
        return Ok(None);
    }
    if !cond
        .call_method1(names.acquire.bind(py), (false,))?
        .is_truthy()?
    {
        return Ok(None);
    }
    let mut held = Vec::new();
    let finished = match tell_quietly(names, future, ok, &cond, &mut held) {
        Some(true) => finish_and_tell(names, future, ok, value, &held, lock),
        _ => Ok(None),
    };
    // Let go in the reverse order of taking, whatever happened.
    let mut released = Ok(());
    for told in held.iter().rev() {
        released = released.and(told.lock.call_method0(names.release.bind(py)).map(drop));
    }
    released = released.and(cond.call_method0(names.release.bind(py)).map(drop));
    let finished = finished?;
    released?;
    Ok(finished)
}

/// With the Condition held: whether the future's outcome can be told
/// without Python (`Some(true)`), taking each waiter's lock into `held`.
/// None for anything unexpected, as false: the Python path then.
fn tell_quietly<'py>(
    names: &Names,
    future: &Bound<'py, PyAny>,
    ok: bool,
    cond: &Bound<'py, PyAny>,
    held: &mut Vec<HeldWaiter<'py>>,
) -> Option<bool> {
    let py = future.py();
    // (Whether it still runs is checked where its state changes, under the
    // state lock: `finish_and_tell`.)
    let callbacks = future.getattr(names.callbacks.bind(py)).ok()?;
    if !callbacks.is_none() && callbacks.len().ok()? > 0 {
        return Some(false);
    }
    // A thread in the Condition's own wait() must be notified: Python code.
    let sleepers_of = names.sleepers_of.bind(py).cast::<PyDict>().ok()?;
    if let Some(sleepers) = sleepers_of.get_item(cond).ok()? {
        if sleepers.len().ok()? > 0 {
            return Some(false);
        }
    }
    let waiters = future.getattr(names.waiter_list.bind(py)).ok()?;
    if waiters.is_none() {
        return Some(true);
    }
    for waiter in waiters.try_iter().ok()? {
        let waiter = waiter.ok()?;
        let kind = if waiter.get_type().is(names.all_completed_waiter.bind(py)) {
            WaiterKind::AllCompleted
        } else if waiter.get_type().is(names.as_completed_waiter.bind(py)) {
            WaiterKind::AsCompleted
        } else {
            return Some(false);
        };
        let waiter_lock = waiter.getattr(names.lock.bind(py)).ok()?;
        let taken = waiter_lock
            .call_method1(names.acquire.bind(py), (false,))
            .ok()?
            .is_truthy()
            .ok()?;
        if !taken {
            return Some(false);
        }
        // Held from here on, so let go whatever follows.
        held.push(HeldWaiter {
            waiter: waiter.clone(),
            lock: waiter_lock,
            finished_futures: None,
            pending: None,
        });
        let attr = |name: &Py<PyString>| waiter.getattr(name.bind(py)).ok();
        let finished_futures = attr(&names.finished_futures)?.cast_into::<PyList>().ok()?;
        held.last_mut()?.finished_futures = Some(finished_futures);
        let quiet = match kind {
            // Its event already set: set() would change nothing.
            WaiterKind::AsCompleted => attr(&names.event)?
                .getattr(names.flag.bind(py))
                .ok()?
                .is_truthy()
                .ok()?,
            WaiterKind::AllCompleted => {
                let stops = !ok && attr(&names.stop_on_exception)?.is_truthy().ok()?;
                let pending: i64 = attr(&names.num_pending_calls)?.extract().ok()?;
                held.last_mut()?.pending = Some(pending);
                // The last pending call sets the event.
                !stops && pending > 1
            }
        };
        if !quiet {
            return Some(false);
        }
    }
    Some(true)
}

/// Store the outcome, take the `result()` gates, then tell the waiters
/// what their `add_result`/`add_exception` would, short of setting the
/// event, which `tell_quietly` made sure none needs.
fn finish_and_tell<'py>(
    names: &Names,
    future: &Bound<'py, PyAny>,
    ok: bool,
    value: &Bound<'py, PyAny>,
    held: &[HeldWaiter<'py>],
    lock: &mut StateLock<'py>,
) -> PyResult<Option<Gates<'py>>> {
    let py = future.py();
    let gates = lock.run(|| {
        if !future
            .getattr(names.state.bind(py))?
            .is(names.running.bind(py))
        {
            return Ok(None);
        }
        store_outcome(names, future, ok, value).map(Some)
    });
    lock.let_go();
    let Some(gates) = gates? else {
        return Ok(None); // the state lock was busy: nothing changed
    };
    // The future is finished: its waiters are told before anything else
    // can fail.
    let told_all = held.iter().try_for_each(|told| -> PyResult<()> {
        if let Some(finished_futures) = &told.finished_futures {
            finished_futures.append(future)?;
        }
        if let Some(pending) = told.pending {
            told.waiter
                .setattr(names.num_pending_calls.bind(py), pending - 1)?;
        }
        Ok(())
    });
    told_all?;
    Ok(Some(gates))
}
