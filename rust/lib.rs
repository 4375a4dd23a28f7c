//! The Rust core of taut. This file only declares modules and registers the
//! Python module `taut._core`; the logic lives in one file per concern.

mod async_exc;
mod next_instruction;
pub mod pool;
mod py_future_state;
mod py_loop;
mod py_pool;
mod py_scope;
mod py_state_lock;

use pyo3::prelude::*;

pub mod clamp;
pub mod gil;
mod py_clamp;
mod py_timer;
pub mod state_lock;
pub mod timer;

mod proctree;
mod py_proctree;
mod tree_kill;

#[pymodule]
mod _core {
    use pyo3::prelude::*;

    #[pymodule_export]
    use crate::py_loop::{LoopChannel, WokenBatch};
    #[pymodule_export]
    use crate::py_pool::{PoolCore, WorkerSlot};
    #[pymodule_export]
    use crate::py_scope::{
        _os_thread_ident, _scope_setup, fail_after, move_on_after, Done, Ready, ScopeCore,
    };
    #[pymodule_export]
    use crate::py_state_lock::FutureStateLock;

    #[pymodule_export]
    use crate::gil::{_close_gil_gate, _gil_gate_after_fork, _gil_gate_closed, _set_main_thread};

    #[pymodule_export]
    const MAX_TIMEOUT: f64 = crate::clamp::MAX_TIMEOUT_SECS;
    #[pymodule_export]
    const OS_WAIT_SLICE: f64 = crate::clamp::OS_WAIT_SLICE_SECS;
    #[pymodule_export]
    use crate::py_clamp::{_seconds, clamp_timeout};
    #[pymodule_export]
    use crate::py_timer::{
        _os_wait_probe, _take_back_own_interrupt, _take_sent_signals, _timer_add_panicking_action,
        _timer_after_fork, _timer_info, _timer_next_callback, _timer_probe, _timer_shutdown,
        monotonic, Deadline,
    };

    #[pymodule_export]
    use crate::py_proctree::{
        process_start_time, running_processes, signal_process_tree, signal_process_tree_at,
        signal_process_trees, TreeKill,
    };

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        crate::async_exc::init(m.py())?;
        crate::py_scope::init(m.py())?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }
}
