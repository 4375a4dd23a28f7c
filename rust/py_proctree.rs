//! Python bindings for `proctree`: argument conversion and error mapping only.
//! Every call releases the GIL while it scans `/proc` and signals.
//!
//! Arguments are taken as Python objects and converted here, so a pid or start
//! time out of the platform's range is a `ValueError` naming the parameter and
//! the value (PyO3's own conversion would raise `OverflowError`), and OS errors
//! become the `OSError` subclass their errno selects, in one function.

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::gil;
use crate::proctree::{self, ProcId};
use crate::py_clamp::{describe, int_in};
use crate::py_timer::Deadline;

/// The one place where `proctree`'s errors become Python exceptions:
/// `InvalidInput` is a `ValueError`; an OS error is `OSError(errno, strerror)`,
/// which CPython turns into its subclass (`PermissionError` for EPERM,
/// `ProcessLookupError` for ESRCH, `FileNotFoundError` for ENOENT, ...).
fn to_py_err(err: std::io::Error) -> PyErr {
    if let Some((errno, strerror)) = proctree::errno_of(&err) {
        return PyOSError::new_err((errno, strerror));
    }
    if err.kind() == std::io::ErrorKind::InvalidInput {
        PyValueError::new_err(err.to_string())
    } else {
        PyOSError::new_err(err.to_string())
    }
}

fn pid_arg(value: &Bound<'_, PyAny>) -> PyResult<i32> {
    let pid = int_in("pid", value, 1, i32::MAX.into(), "a positive process id")?;
    Ok(pid as i32)
}

fn sig_arg(value: &Bound<'_, PyAny>) -> PyResult<i32> {
    Ok(int_in("sig", value, 1, 64, "a signal number")? as i32)
}

fn start_time_arg(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match value {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => {
            let t = int_in("start_time", v, 0, i64::MAX, "clock ticks after boot")?;
            Ok(Some(t as u64))
        }
    }
}

/// `procs`: an iterable of `(pid, start_time)` pairs.
fn ids_arg(procs: &Bound<'_, PyAny>) -> PyResult<Vec<ProcId>> {
    let mut out = Vec::new();
    for item in procs.try_iter()? {
        let item = item?;
        let Ok((pid, start_time)) = item.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>() else {
            return Err(PyTypeError::new_err(format!(
                "procs must hold (pid, start_time) pairs, got {}",
                describe(&item, 40)?
            )));
        };
        out.push(ProcId {
            pid: pid_arg(&pid)?,
            start_time: int_in(
                "start_time",
                &start_time,
                0,
                i64::MAX,
                "clock ticks after boot",
            )? as u64,
        });
    }
    Ok(out)
}

fn pairs(procs: Vec<ProcId>) -> Vec<(i32, u64)> {
    procs.into_iter().map(|p| (p.pid, p.start_time)).collect()
}

type Signalled = (Vec<(i32, u64)>, Vec<(i32, u64)>);

/// Freeze, signal and (for catchable signals) continue the tree rooted at `pid`.
/// Returns `None` if the root is gone (or is not the process `start_time` names),
/// else `(signalled, skipped)`: the `(pid, start_time)` identities signalled, and
/// those of protected processes the tree reached and left alone. A root that is
/// the caller, an ancestor of it or a member of its group is a `ValueError`.
#[pyfunction]
#[pyo3(signature = (pid, sig, start_time=None))]
pub fn signal_process_tree(
    py: Python<'_>,
    pid: &Bound<'_, PyAny>,
    sig: &Bound<'_, PyAny>,
    start_time: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Signalled>> {
    let (pid, sig, start_time) = (pid_arg(pid)?, sig_arg(sig)?, start_time_arg(start_time)?);
    let outcome =
        gil::detach(py, || proctree::signal_tree(pid, sig, start_time)).map_err(to_py_err)?;
    Ok(outcome
        .root_found
        .then(|| (pairs(outcome.signalled), pairs(outcome.skipped))))
}

/// Like `signal_process_tree` for several roots named by identity (the second
/// round of a graceful kill). Returns `(signalled, skipped)`.
#[pyfunction]
pub fn signal_process_trees(
    py: Python<'_>,
    procs: &Bound<'_, PyAny>,
    sig: &Bound<'_, PyAny>,
) -> PyResult<Signalled> {
    let (roots, sig) = (ids_arg(procs)?, sig_arg(sig)?);
    let outcome = gil::detach(py, || proctree::signal_trees(&roots, sig)).map_err(to_py_err)?;
    Ok((pairs(outcome.signalled), pairs(outcome.skipped)))
}

/// The identities among `procs` that still run (zombies have exited).
#[pyfunction]
pub fn running_processes(py: Python<'_>, procs: &Bound<'_, PyAny>) -> PyResult<Vec<(i32, u64)>> {
    let procs = ids_arg(procs)?;
    Ok(pairs(gil::detach(py, || {
        procs
            .into_iter()
            .filter(|p| proctree::is_running(*p))
            .collect()
    })))
}

/// The start time of `pid` in clock ticks after boot (`/proc/PID/stat` field 22),
/// or `None` if there is no such process.
#[pyfunction]
pub fn process_start_time(pid: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    Ok(proctree::process_start_time(pid_arg(pid)?))
}

/// At the expiry of `deadline`, kill the tree rooted at `pid` (named by
/// `start_time` when given) with `sig`. The timer thread only starts a short-lived
/// thread for it, so scanning `/proc` never delays other deadlines, and nothing
/// needs the GIL. If the deadline has already expired, this happens at once. A
/// root the caller must never signal is refused now, and again at expiry.
#[pyfunction]
#[pyo3(signature = (deadline, pid, sig, start_time=None))]
pub fn signal_process_tree_at(
    deadline: &Bound<'_, Deadline>,
    pid: &Bound<'_, PyAny>,
    sig: &Bound<'_, PyAny>,
    start_time: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let (pid, sig, start_time) = (pid_arg(pid)?, sig_arg(sig)?, start_time_arg(start_time)?);
    proctree::check_target(pid).map_err(to_py_err)?;
    deadline.get().entry().add_action(Box::new(move || {
        let kill = move || {
            let _ = proctree::signal_tree(pid, sig, start_time);
        };
        // If no thread can be started (resource exhaustion), kill inline: late
        // other deadlines are better than a tree that survives its deadline.
        let spawned = std::thread::Builder::new()
            .name("taut-proctree".into())
            .spawn(kill);
        if spawned.is_err() {
            let _ = proctree::signal_tree(pid, sig, start_time);
        }
    }));
    Ok(())
}
