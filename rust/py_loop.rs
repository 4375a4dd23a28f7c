//! One asyncio event loop's wake-up channel: finished calls and expired
//! deadlines delivered to the loop through one descriptor.
//!
//! The standard way for a worker thread to finish an awaited call is
//! `loop.call_soon_threadsafe`, once per call: a lock, a callback object and
//! a write to the loop's self-pipe each time, all Python run by the worker.
//! Here a worker pushes `(target, ok, value)` onto the loop's channel (no
//! Python code) and writes one byte only when the loop is not already due
//! to drain; the loop's reader callback then settles every finished call in
//! one pass.
//!
//! Deadlines use the same channel: [`LoopChannel::arm`] arms a deadline
//! whose expiry pushes `(target, None, None)` from the timer thread,
//! without the GIL. A deadline that never fires costs its arm and its
//! cancel, nothing on the loop.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::gil;
use crate::py_timer::{
    add_or_run_inline, drop_on_callback_thread, ensure_callback_thread, fd_kind, write_byte,
    Deadline, FdKind,
};
use crate::timer::Entry;

/// One finished call (or, with `ok` None, a "there is room now" notice or
/// an expired deadline's target).
type Completion = (Py<PyAny>, Option<bool>, Py<PyAny>);

/// What the Python object and every deadline armed through it share. The
/// descriptor is closed when the last of them lets go, so the timer thread
/// never writes to a descriptor number that was closed and reused.
struct Shared {
    /// The completions, and whether the Python object is gone (nobody will
    /// take them any more).
    inbox: Mutex<(Vec<Completion>, bool)>,
    /// A wake-up byte is on its way: later pushes need not write another.
    armed: AtomicBool,
    fd: i32,
    kind: FdKind,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, (Vec<Completion>, bool)> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a completion and wake the loop if it is not already woken.
    /// Runs no Python code and needs no GIL (references are only moved).
    fn push(&self, completion: Completion) {
        if self.enqueue(completion) == Some(true) {
            self.wake();
        }
    }

    /// Queue a completion: `Some(true)` when the caller must `wake` the
    /// loop (it is not already due to drain), None when it was dropped
    /// instead (the loop's end is gone: nobody will ever take it).
    fn enqueue(&self, completion: Completion) -> Option<bool> {
        let mut inbox = self.lock();
        if inbox.1 {
            drop(inbox);
            drop_on_callback_thread_all([completion]);
            return None;
        }
        inbox.0.push(completion);
        drop(inbox);
        Some(!self.armed.swap(true, Ordering::AcqRel))
    }

    /// Nobody will take completions any more: returns those waiting, for
    /// the caller to drop; later ones are dropped as they come.
    fn close(&self) -> Vec<Completion> {
        let mut inbox = self.lock();
        inbox.1 = true;
        std::mem::take(&mut inbox.0)
    }

    /// Write the wake-up byte.
    fn wake(&self) {
        #[cfg(unix)]
        write_byte(self.fd, self.kind);
    }

    /// Put back what a drain took and did not settle, ahead of what came
    /// since (it is older), and wake the loop for it unless it is woken
    /// already. Dropped instead when the loop's end is gone (as `enqueue`
    /// does). Runs no Python code.
    fn put_back(&self, left: VecDeque<Completion>) {
        if left.is_empty() {
            return;
        }
        let mut inbox = self.lock();
        if inbox.1 {
            drop(inbox);
            drop_on_callback_thread_all(left);
            return;
        }
        let newer = std::mem::take(&mut inbox.0);
        inbox.0 = left.into_iter().chain(newer).collect();
        drop(inbox);
        if !self.armed.swap(true, Ordering::AcqRel) {
            self.wake();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: the channel owns this descriptor (see `LoopChannel::new`)
        // and this is the last reference to it.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// One event loop's channel. Python owns the reading end of the socket pair;
/// the channel owns the writing end.
/// Weakly referenceable: the fast lookup of the last loop used
/// (`taut._loop_waker.last_seen`) must not keep a dropped loop's channel, and
/// through what waits in it the loop, alive.
#[pyclass(frozen, weakref, module = "taut._core")]
pub struct LoopChannel {
    shared: Arc<Shared>,
}

impl LoopChannel {
    /// Queue a completion and wake the loop if it is not already woken.
    /// Called with the GIL held (the values are Python objects); runs no
    /// Python code. The wake-up byte is written with the GIL released, as
    /// `call_soon_threadsafe`'s own socket write does: the loop, woken by
    /// it, finds the GIL free instead of waking a second time for it once
    /// this thread lets go. False when the loop's end is gone and the
    /// completion was dropped (see `close_inbox`): nobody will act on it.
    pub(crate) fn push(&self, py: Python<'_>, completion: Completion) -> bool {
        match self.shared.enqueue(completion) {
            None => false,
            Some(false) => true,
            Some(true) => {
                let shared = Arc::clone(&self.shared);
                gil::detach(py, move || shared.wake());
                true
            }
        }
    }

    /// Nobody will take completions any more: what is still queued
    /// (futures, results: user objects whose deallocation can run Python
    /// code) goes to the callback thread, as do later pushes from deadlines
    /// armed through this channel. Never dropped here, below a Rust frame.
    fn let_go(&self) {
        drop_on_callback_thread_all(self.shared.close());
    }

    /// At `entry`'s expiry, push `target` (or push it now if it already
    /// fired). Called with the GIL held.
    fn attach(&self, py: Python<'_>, entry: &Entry, target: Py<PyAny>) {
        let shared = Arc::clone(&self.shared);
        let completion: Completion = (target, None, py.None());
        // Cancelled first: the action is dropped by `cancel()`, GIL held.
        add_or_run_inline(entry, Box::new(move || shared.push(completion)));
    }
}

#[pymethods]
impl LoopChannel {
    /// A channel writing its wake-ups to `fd` (a socket, or a non-blocking
    /// pipe), which it owns from now on.
    #[new]
    fn new(py: Python<'_>, fd: i32) -> PyResult<Self> {
        let kind = fd_kind(fd)?;
        // What a dropped channel leaves (and what reaches it after) is let go
        // on taut's callback thread: started now, while we hold the GIL, or
        // those objects (a closed loop's futures, results) would wait in its
        // queue for good, keeping the loop alive. Failing to start it (the
        // interpreter is exiting) only risks that leak: no reason to refuse
        // the loop.
        let _ = ensure_callback_thread(py);
        Ok(LoopChannel {
            shared: Arc::new(Shared {
                inbox: Mutex::new((Vec::new(), false)),
                armed: AtomicBool::new(false),
                fd,
                kind,
            }),
        })
    }

    /// Everything pushed so far, oldest first. Read the wake-up bytes
    /// before calling this: a push after it writes a fresh byte.
    fn take(&self) -> Vec<Completion> {
        let mut inbox = self.shared.lock();
        self.shared.armed.store(false, Ordering::Release);
        std::mem::take(&mut inbox.0)
    }

    /// Arm a deadline at `at` (absolute `time.monotonic()` seconds) that
    /// pushes `(target, None, None)` onto this channel at expiry, from the
    /// timer thread; what the loop does with `target` is its reader's
    /// business. One call instead of arming and then attaching.
    pub(crate) fn arm(&self, py: Python<'_>, at: f64, target: Py<PyAny>) -> PyResult<Deadline> {
        let deadline = Deadline::arm(at)?;
        self.attach(py, deadline.entry(), target);
        Ok(deadline)
    }

    /// Push `(target, None, None)` onto this channel when `deadline`
    /// expires (at once if it already has); never if it is cancelled first.
    fn watch(&self, py: Python<'_>, deadline: &Bound<'_, Deadline>, target: Py<PyAny>) {
        self.attach(py, deadline.get().entry(), target);
    }

    /// `take` for the loop's reader callback: first empty the reading end
    /// `reader_fd` of the wake-up bytes (without blocking, and without the
    /// Python exception a non-blocking `recv` raises once it is empty),
    /// then take, as a [`WokenBatch`]. The caller owns `reader_fd` and
    /// keeps it open meanwhile.
    fn take_woken(&self, reader_fd: i32) -> WokenBatch {
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
        WokenBatch {
            shared: Arc::clone(&self.shared),
            left: self.take().into(),
        }
    }

    /// The loop closed: nobody will take completions any more. Returns
    /// those waiting, for the caller to drop (in Python: they may hold the
    /// last reference to a user object); later pushes are dropped where the
    /// GIL can be taken, never kept. (Kept, a finished call's future would
    /// keep its closed loop alive, and with it the loop's waker, the
    /// channel and both descriptors, for good.)
    fn close_inbox(&self) -> Vec<Completion> {
        self.shared.close()
    }

    /// How many completions wait to be taken.
    fn __len__(&self) -> usize {
        self.shared.lock().0.len()
    }

    /// Show the garbage collector what waits here. A finished call's future
    /// references its loop, whose reader callback references this channel:
    /// unseen, that cycle kept a loop dropped without `close()` alive for
    /// good, with its descriptors. The lock is waited for, never skipped:
    /// the collector traverses twice and must see the same references each
    /// time (one seen in the first pass only would make what only the
    /// channel holds look like garbage). No holder of the lock waits for the
    /// GIL, which the collector holds: the timer thread pushes without it,
    /// and workers push and the loop takes with it, never letting go of it
    /// in between.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        let inbox = self.shared.lock();
        for (target, _, value) in inbox.0.iter() {
            visit.call(target)?;
            visit.call(value)?;
        }
        Ok(())
    }

    /// The collector found this channel in garbage (its loop was dropped
    /// without `close()`): nobody will take what waits here. Let go of it,
    /// which breaks the cycle, as the channel's end does (see `Drop`: the
    /// collector may run on any thread, a worker's included). Owners that
    /// must act when their loop goes act in their finalizers, which the
    /// collector runs before this (see `_RoomNotice.__del__`).
    fn __clear__(&self) {
        self.let_go();
    }
}

impl Drop for LoopChannel {
    fn drop(&mut self) {
        // The last reference may be a finished job's, let go on a worker
        // thread right after its push.
        self.let_go();
    }
}

/// What one pass of the loop's reader callback took from its channel,
/// handed out one entry at a time (an iterator of `(target, ok, value)`).
/// Whatever was not handed out yet goes back to the channel, ahead of later
/// entries and with a wake-up of its own, when the pass stops early: at
/// `give_back()` (the reader's `except` clause) or when this object goes
/// away. So an entry that raises, or a Ctrl-C landing anywhere in the pass
/// (even as `take_woken` returns, before its result is stored), loses at
/// most the entry being settled, never the ones behind it. (A returned
/// list, dropped by such a Ctrl-C, lost the whole batch.)
#[pyclass(module = "taut._core")]
pub struct WokenBatch {
    shared: Arc<Shared>,
    left: VecDeque<Completion>,
}

#[pymethods]
impl WokenBatch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self) -> Option<Completion> {
        self.left.pop_front()
    }

    /// Put the entries not handed out yet back into the channel (see the
    /// type); this batch is empty afterwards.
    fn give_back(&mut self) {
        self.shared.put_back(std::mem::take(&mut self.left));
    }

    /// How many entries are left to hand out.
    fn __len__(&self) -> usize {
        self.left.len()
    }
}

impl Drop for WokenBatch {
    fn drop(&mut self) {
        // Only references move (no Python code runs): safe wherever the
        // last reference goes.
        self.give_back();
    }
}

/// Hand completions nobody will take to taut's callback thread, which drops
/// them with the GIL and no Rust frame below (see `py_pool.rs`: no user
/// object's last reference is let go on a worker, nor on the timer thread,
/// which never takes the GIL).
fn drop_on_callback_thread_all(completions: impl IntoIterator<Item = Completion>) {
    for (target, _, value) in completions {
        drop_on_callback_thread(target);
        drop_on_callback_thread(value);
    }
}
