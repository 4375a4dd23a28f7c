//! CPython 3.13+: an interrupt raised at a thread's next instruction, not as
//! an asynchronous exception.
//!
//! CPython 3.13 raises an asynchronous exception at the thread's next check
//! for one, which can be a loop's backward jump: an instruction its compiler
//! leaves outside the `try` and `with` blocks around the loop, so the
//! exception skips every handler of that frame (see `taut._backward_jump`,
//! which holds what waits and the `sys.monitoring` hook that raises it).
//! Arming reads the code object of the thread's running frame and enables
//! the hook's event on it; the thread raises at its next instruction there.
//! Arming is C-level calls on Python objects, with the GIL held: no bytecode
//! runs, so the thread cannot move on meanwhile (past the module's first
//! import, which comes before looking at the thread).

use pyo3::prelude::*;
use pyo3::types::PyDict;

const MODULE: &str = "taut._backward_jump";

/// Have `exc_type` raised at the next instruction thread `thread_id` runs
/// in the code object of its running frame; returns what was stored for it
/// (for [`withdraw`]). None where that is not done: before CPython 3.13 (the
/// asynchronous exception is raised inside the blocks there), when the
/// thread runs no Python frame, or when taut has no `sys.monitoring` tool id.
pub fn arm(py: Python<'_>, thread_id: u64, exc_type: &Bound<'_, PyAny>) -> Option<Py<PyAny>> {
    if py.version_info() < (3, 13) {
        return None;
    }
    let arm = || -> PyResult<Option<Py<PyAny>>> {
        let module = py.import(MODULE)?;
        let tool = module.getattr("TOOL")?;
        if tool.is_none() {
            return Ok(None);
        }
        let sys = py.import("sys")?;
        let frames = sys.getattr("_current_frames")?.call0()?;
        let Some(frame) = frames.cast::<PyDict>()?.get_item(thread_id)? else {
            return Ok(None);
        };
        let code = frame.getattr("f_code")?;
        // An object of this arming's own (functools.partial is C): a later
        // arming for the same thread and code is not withdrawn with it.
        let make_error = py
            .import("functools")?
            .getattr("partial")?
            .call1((exc_type,))?;
        module
            .getattr("_pending")?
            .set_item((code.clone(), thread_id), &make_error)?;
        let monitoring = sys.getattr("monitoring")?;
        let instruction = monitoring.getattr("events")?.getattr("INSTRUCTION")?;
        monitoring.call_method1("set_local_events", (tool, code, instruction))?;
        Ok(Some(make_error.unbind()))
    };
    arm().ok().flatten()
}

/// Take back what waits for thread `thread_id`'s next instruction (only
/// what `armed` stored, if given); true if something did (not raised yet).
/// Runs Python code (`taut._backward_jump.forget`): safe, as the hook and
/// this take from one dictionary, so exactly one of them gets an entry.
pub fn withdraw(py: Python<'_>, thread_id: u64, armed: Option<&Bound<'_, PyAny>>) -> bool {
    let withdraw = || -> PyResult<bool> {
        let modules = py.import("sys")?.getattr("modules")?;
        let Some(module) = modules.cast::<PyDict>()?.get_item(MODULE)? else {
            return Ok(false);
        };
        module
            .call_method1("forget", (thread_id, armed))?
            .is_truthy()
    };
    withdraw().unwrap_or(false)
}
