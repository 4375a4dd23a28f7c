//! The Rust core of taut. This file only declares modules and registers the
//! Python module `taut._core`; the logic lives in one file per concern.

pub mod pool;
mod py_pool;

use pyo3::prelude::*;

#[pymodule]
mod _core {
    use pyo3::prelude::*;

    #[pymodule_export]
    use crate::py_pool::{PoolCore, WorkerSlot};

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }
}
