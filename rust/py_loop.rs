//! Completions delivered to an asyncio event loop through one descriptor.
//!
//! The standard way for a worker thread to finish an awaited call is
//! `loop.call_soon_threadsafe`, once per call: a lock, a callback object and
//! a write to the loop's self-pipe each time, all Python run by the worker.
//! Here a worker pushes `(target, ok, value)` onto the loop's channel (no
//! Python code) and writes one byte only when the loop is not already due
//! to drain; the loop's reader callback (`taut._asyncio`) then settles every
//! finished call in one pass.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use pyo3::prelude::*;

use crate::gil;
use crate::py_timer::{fd_kind, write_byte, FdKind};

/// One finished call (or, with `ok` None, a "there is room now" notice
/// whose target is a callable).
type Completion = (Py<PyAny>, Option<bool>, Py<PyAny>);

/// One event loop's channel. Python owns the reading end of the socket pair;
/// the channel owns the writing end and closes it when it is dropped, so a
/// worker never writes to a descriptor number that was reused.
#[pyclass(frozen, module = "taut._core")]
pub struct LoopChannel {
    inbox: Mutex<Vec<Completion>>,
    /// A wake-up byte is on its way: later pushes need not write another.
    armed: AtomicBool,
    fd: i32,
    kind: FdKind,
}

impl LoopChannel {
    /// Queue a completion and wake the loop if it is not already woken.
    /// Called with the GIL held (the values are Python objects); runs no
    /// Python code. The wake-up byte is written with the GIL released, as
    /// `call_soon_threadsafe`'s own socket write does: the loop, woken by
    /// it, finds the GIL free instead of waking a second time for it once
    /// this thread lets go.
    pub(crate) fn push(&self, py: Python<'_>, completion: Completion) {
        self.inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(completion);
        if !self.armed.swap(true, Ordering::AcqRel) {
            #[cfg(unix)]
            {
                let (fd, kind) = (self.fd, self.kind);
                gil::detach(py, move || write_byte(fd, kind));
            }
            #[cfg(not(unix))]
            let _ = py;
        }
    }
}

#[pymethods]
impl LoopChannel {
    /// A channel writing its wake-ups to `fd` (a socket, or a non-blocking
    /// pipe), which it owns from now on.
    #[new]
    fn new(fd: i32) -> PyResult<Self> {
        let kind = fd_kind(fd)?;
        Ok(LoopChannel {
            inbox: Mutex::new(Vec::new()),
            armed: AtomicBool::new(false),
            fd,
            kind,
        })
    }

    /// Everything pushed so far, oldest first. Read the wake-up bytes
    /// before calling this: a push after it writes a fresh byte.
    fn take(&self) -> Vec<Completion> {
        let mut inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        self.armed.store(false, Ordering::Release);
        std::mem::take(&mut *inbox)
    }

    /// `take` for the loop's reader callback: first empty the reading end
    /// `reader_fd` of the wake-up bytes (without blocking, and without the
    /// Python exception a non-blocking `recv` raises once it is empty),
    /// then take. The caller owns `reader_fd` and keeps it open meanwhile.
    fn take_woken(&self, reader_fd: i32) -> Vec<Completion> {
        #[cfg(unix)]
        {
            let mut buf = [0u8; 256];
            loop {
                // SAFETY: reads into a valid buffer of its own length; never
                // blocks (MSG_DONTWAIT). At most a few bytes are ever pending
                // (one per arming), so this is one call in the common case.
                let n = unsafe {
                    libc::recv(
                        reader_fd,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                if n < buf.len() as isize {
                    break;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = reader_fd;
        self.take()
    }

    /// How many completions wait to be taken.
    fn __len__(&self) -> usize {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for LoopChannel {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: the channel owns this descriptor (see `new`).
        unsafe {
            libc::close(self.fd);
        }
    }
}
