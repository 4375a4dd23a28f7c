//! Interrupts: raising an exception in another thread at its next bytecode
//! boundary (`PyThreadState_SetAsyncExc`), and taking one back that was set
//! but has not landed.
//!
//! Taking one back with `PyThreadState_SetAsyncExc(thread, NULL)` is what the
//! C API offers, and before CPython 3.13 it leaves the interpreter's
//! "an asynchronous exception is pending" flag raised for good: the flag is
//! lowered only when some thread actually raises its exception, and NULL
//! raises the flag without giving any thread one to raise. From then on every
//! thread of the process takes the slow path at each eval-breaker check
//! (measured: plain Python loops 14–48% slower on 3.9–3.12), and on 3.11 a
//! `sys.setprofile`/`sys.settrace` hook (debuggers, profilers, coverage)
//! hangs at the next function call. Every deadline that interrupted its call
//! took its interrupt back this way on leaving, so one timed-out call was
//! enough.
//!
//! So before 3.13 the pending interrupt is replaced by a private marker
//! exception, which the thread then raises and catches at once by running
//! a tiny Python function: raising it lowers the flag. (Only a thread's own
//! pending interrupt can be taken back this way, as the callers need.)

use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;

/// The marker exception class and the function that raises it.
static ABSORBER: OnceLock<(Py<PyAny>, Py<PyAny>)> = OnceLock::new();

const ABSORBER_SOURCE: &std::ffi::CStr = c"
class TakenBack(BaseException):
    '''Set in place of an interrupt taken back; raised and caught at once.'''

def absorb():
    # The marker is raised at the first eval-breaker check in here.
    for _ in (0, 0):
        pass
";

/// Made once, at module import (with the GIL held, before any thread can
/// need it): filled later, the cell could be left locked in a forked child.
pub fn init(py: Python<'_>) -> PyResult<()> {
    if ABSORBER.get().is_some() {
        return Ok(());
    }
    let module = PyModule::from_code(
        py,
        ABSORBER_SOURCE,
        c"<taut async_exc>",
        c"taut._taken_back",
    )?;
    let marker = module.getattr("TakenBack")?.unbind();
    let absorb = module.getattr("absorb")?.unbind();
    let _ = ABSORBER.set((marker, absorb));
    Ok(())
}

/// Raise `exc_type` in thread `thread_id` at its next bytecode boundary.
/// True if that thread exists.
pub fn send(thread_id: u64, exc_type: &Bound<'_, PyAny>) -> bool {
    // SAFETY: called with the GIL held (the bound reference proves it), on
    // an exception class the callers checked.
    unsafe { ffi::PyThreadState_SetAsyncExc(thread_id as _, exc_type.as_ptr()) == 1 }
}

/// Take back an interrupt set for the calling thread that may not have
/// landed yet (a no-op if none is pending). An exception that a signal
/// handler raises meanwhile (the main thread's Ctrl-C) is returned: it
/// landed here, as it would have at the caller's next bytecode.
pub fn take_back_own(py: Python<'_>) -> PyResult<()> {
    // SAFETY: GIL held (the token proves it).
    let own = unsafe { ffi::PyThread_get_thread_ident() } as u64;
    let (marker, absorb) = match ABSORBER.get() {
        Some(absorber) if py.version_info() < (3, 13) => absorber,
        _ => {
            clear(own);
            crate::next_instruction::withdraw(py, own, None);
            return Ok(());
        }
    };
    send(own, marker.bind(py));
    let mut landed_meanwhile = None;
    // A signal handler's exception comes before ours (CPython runs the
    // handlers first); a second one before our marker is next to
    // impossible, but the loop stays bounded.
    let mut absorbed = false;
    for _ in 0..4 {
        match absorb.bind(py).call0() {
            Err(err) if err.is_instance(py, marker.bind(py)) => {
                absorbed = true;
                break;
            }
            Err(err) => {
                landed_meanwhile.get_or_insert(err);
            }
            Ok(_) => break,
        }
    }
    if !absorbed {
        // Never seen (no eval-breaker check ran): it must not land later,
        // in unrelated code. The flag then stays up, as before.
        clear(own);
    }
    match landed_meanwhile {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// `PyThreadState_SetAsyncExc(thread, NULL)`: from 3.13 this also lowers
/// the thread's flag; before, see the module's documentation.
fn clear(thread_id: u64) {
    // SAFETY: only called with the GIL held (from functions holding a token).
    unsafe { ffi::PyThreadState_SetAsyncExc(thread_id as _, std::ptr::null_mut()) };
}
