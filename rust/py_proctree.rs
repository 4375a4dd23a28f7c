//! Python bindings for `proctree`: type conversion and error mapping only. Every
//! call releases the GIL while it scans `/proc` and signals.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::gil;
use crate::proctree::{self, ProcId};
use crate::py_timer::Deadline;

fn to_py_err(err: std::io::Error) -> PyErr {
    if err.kind() == std::io::ErrorKind::InvalidInput {
        PyValueError::new_err(err.to_string())
    } else {
        PyOSError::new_err(err.to_string())
    }
}

fn ids(procs: Vec<(i32, u64)>) -> Vec<ProcId> {
    procs
        .into_iter()
        .map(|(pid, start_time)| ProcId { pid, start_time })
        .collect()
}

fn pairs(procs: Vec<ProcId>) -> Vec<(i32, u64)> {
    procs.into_iter().map(|p| (p.pid, p.start_time)).collect()
}

/// Freeze, signal and (for catchable signals) continue the tree rooted at `pid`.
/// Returns `None` if the root is gone (or is not the process `start_time` names),
/// else the `(pid, start_time)` identities that were signalled.
#[pyfunction]
#[pyo3(signature = (pid, sig, start_time=None))]
pub fn signal_process_tree(
    py: Python<'_>,
    pid: i32,
    sig: i32,
    start_time: Option<u64>,
) -> PyResult<Option<Vec<(i32, u64)>>> {
    let outcome =
        gil::detach(py, || proctree::signal_tree(pid, sig, start_time)).map_err(to_py_err)?;
    Ok(outcome.root_found.then(|| pairs(outcome.signalled)))
}

/// Like `signal_process_tree` for several roots named by identity (the second
/// round of a graceful kill). Returns the identities signalled.
#[pyfunction]
pub fn signal_process_trees(
    py: Python<'_>,
    procs: Vec<(i32, u64)>,
    sig: i32,
) -> PyResult<Vec<(i32, u64)>> {
    let roots = ids(procs);
    let outcome = gil::detach(py, || proctree::signal_trees(&roots, sig)).map_err(to_py_err)?;
    Ok(pairs(outcome.signalled))
}

/// The identities among `procs` that still run (zombies have exited).
#[pyfunction]
pub fn running_processes(py: Python<'_>, procs: Vec<(i32, u64)>) -> Vec<(i32, u64)> {
    let procs = ids(procs);
    pairs(gil::detach(py, || {
        procs
            .into_iter()
            .filter(|p| proctree::is_running(*p))
            .collect()
    }))
}

/// The start time of `pid` in clock ticks after boot (`/proc/PID/stat` field 22),
/// or `None` if there is no such process.
#[pyfunction]
pub fn process_start_time(pid: i32) -> Option<u64> {
    proctree::process_start_time(pid)
}

/// At the expiry of `deadline`, kill the tree rooted at `pid` (named by
/// `start_time` when given) with `sig`. The timer thread only starts a short-lived
/// thread for it, so scanning `/proc` never delays other deadlines, and nothing
/// needs the GIL. If the deadline has already expired, this happens at once.
#[pyfunction]
#[pyo3(signature = (deadline, pid, sig, start_time=None))]
pub fn signal_process_tree_at(
    deadline: &Bound<'_, Deadline>,
    pid: i32,
    sig: i32,
    start_time: Option<u64>,
) -> PyResult<()> {
    if pid <= 0 {
        return Err(PyValueError::new_err(format!(
            "pid must be a positive process id, got {pid}"
        )));
    }
    proctree::check_signal(sig).map_err(to_py_err)?;
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
