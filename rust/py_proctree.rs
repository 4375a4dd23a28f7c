//! Python bindings for `proctree`: argument conversion and error mapping only.
//! Every call releases the GIL while it scans `/proc` and signals.
//!
//! Arguments are taken as Python objects and converted here, so a pid or start
//! time out of the platform's range is a `ValueError` naming the parameter and
//! the value (PyO3's own conversion would raise `OverflowError`), and OS errors
//! become the `OSError` subclass their errno selects, in one function.

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use std::sync::Arc;

use crate::clamp::duration_from_secs;
use crate::gil;
use crate::proctree::{self, ProcId};
use crate::py_clamp::{describe, int_in};
use crate::py_timer::{Deadline, SIGNAL_SLICE};
use crate::tree_kill::{self, KillReport, KillState};

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

/// `pipes`: an iterable of file descriptors, each open on a pipe; their inodes.
fn pipes_arg(pipes: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<u64>> {
    let Some(pipes) = pipes else {
        return Ok(Vec::new());
    };
    let Ok(items) = pipes.try_iter() else {
        return Err(PyTypeError::new_err(format!(
            "pipes must be an iterable of file descriptors, got {}",
            describe(pipes, 40)?
        )));
    };
    let mut out = Vec::new();
    for item in items {
        let item = item?;
        let fd = int_in("pipes", &item, 0, i32::MAX.into(), "a file descriptor")? as i32;
        out.push(proctree::pipe_inode_of_fd(fd).map_err(to_py_err)?);
    }
    Ok(out)
}

/// At the expiry of `deadline`, kill the tree rooted at `pid` (named by
/// `start_time` when given) with `sig`, and report what the kill found (see
/// `TreeKill`). The timer thread only starts a short-lived thread for it, so
/// scanning `/proc` never delays other deadlines, and nothing needs the GIL.
/// If the deadline has already expired, this happens at once. A root the
/// caller must never signal is refused now, and again at expiry. `pipes`: the
/// caller's ends of pipes to the command (file descriptors); a member still
/// holding one of them (that the caller holds too) when the kill comes is
/// reported in `pipe_holders`.
#[pyfunction]
#[pyo3(signature = (deadline, pid, sig, start_time=None, pipes=None))]
pub fn signal_process_tree_at(
    deadline: &Bound<'_, Deadline>,
    pid: &Bound<'_, PyAny>,
    sig: &Bound<'_, PyAny>,
    start_time: Option<&Bound<'_, PyAny>>,
    pipes: Option<&Bound<'_, PyAny>>,
) -> PyResult<TreeKill> {
    let (pid, sig, start_time) = (pid_arg(pid)?, sig_arg(sig)?, start_time_arg(start_time)?);
    let pipes = pipes_arg(pipes)?;
    proctree::check_target(pid).map_err(to_py_err)?;
    let report = tree_kill::kill_tree_at(deadline.get().entry(), pid, sig, start_time, pipes);
    Ok(TreeKill { report })
}

/// What a kill armed by `signal_process_tree_at` found when it struck.
#[pyclass(frozen, module = "taut._core", name = "TreeKill")]
pub struct TreeKill {
    report: Arc<KillReport>,
}

impl TreeKill {
    fn outcome(&self) -> Option<proctree::Outcome> {
        match self.report.state() {
            KillState::Ran(outcome) => Some(outcome),
            _ => None,
        }
    }
}

#[pymethods]
impl TreeKill {
    /// Wait until the kill is over: it ran, failed, or will never run (its
    /// deadline was cancelled first). False if `timeout` seconds passed first.
    /// Without the GIL; on the main thread Ctrl-C still interrupts it.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        if timeout.is_some_and(f64::is_nan) {
            return Err(PyValueError::new_err(
                "timeout must not be NaN, got nan (float)",
            ));
        }
        let limit = timeout.map(duration_from_secs);
        let report = Arc::clone(&self.report);
        if !gil::is_main_thread() {
            // Signals reach only the main thread: nothing to look for here.
            return Ok(gil::detach(py, move || report.wait(limit)));
        }
        gil::detach(py, move || {
            report.wait_interruptible(limit, SIGNAL_SLICE, || {
                gil::attach_briefly(|py| py.check_signals())
            })
        })
    }

    /// `"pending"`, `"ran"`, `"failed"` or `"not run"`.
    #[getter]
    fn state(&self) -> &'static str {
        match self.report.state() {
            KillState::Pending => "pending",
            KillState::Ran(_) => "ran",
            KillState::Failed(_) => "failed",
            KillState::NotRun => "not run",
        }
    }

    /// Whether the kill found the command still running: its root had not
    /// exited (a zombie has), or a member still held one of the watched pipes.
    /// `None` unless the kill ran to its end.
    #[getter]
    fn found_running(&self) -> Option<bool> {
        self.report.found_running()
    }

    /// Whether the root had not exited yet when the kill began; `None` unless it ran.
    #[getter]
    fn root_running(&self) -> Option<bool> {
        self.outcome().map(|o| o.root_running)
    }

    /// The members that still held a watched pipe, as `(pid, start_time)`.
    #[getter]
    fn pipe_holders(&self) -> Vec<(i32, u64)> {
        self.outcome()
            .map_or_else(Vec::new, |o| pairs(o.pipe_holders))
    }

    /// The processes the kill signalled, as `(pid, start_time)`.
    #[getter]
    fn signalled(&self) -> Vec<(i32, u64)> {
        self.outcome().map_or_else(Vec::new, |o| pairs(o.signalled))
    }

    /// Why the kill failed, if it did.
    #[getter]
    fn error(&self) -> Option<String> {
        match self.report.state() {
            KillState::Failed(text) => Some(text),
            _ => None,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<TreeKill {} found_running={}>",
            self.state(),
            match self.found_running() {
                Some(true) => "True",
                Some(false) => "False",
                None => "None",
            }
        )
    }
}
