//! Releasing the GIL without ever meeting a finalizing interpreter.
//!
//! In CPython before 3.14, a thread that tries to take the GIL back after
//! the interpreter began finalizing is ended on the spot with
//! `pthread_exit`. Its forced unwinding through a Rust frame aborts the
//! process ("FATAL: exception not rethrown", exit 134, or a segfault). Every
//! GIL release in taut therefore goes through [`detach`]: once taut's exit
//! hook has closed the gate (an `atexit` callback, while Python is still
//! whole, before finalization starts), any other thread that comes back from
//! a GIL-free wait parks for good instead of re-attaching. It holds no lock
//! and no Python state at that point, and the process ends around it.
//!
//! The thread that closes the gate is the one running the exit hooks (the
//! one that finalizes), so it keeps passing: a later `atexit` callback of its
//! own may still wait on a future.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use pyo3::prelude::*;

/// The gate's state, free of Python so `cargo test` can exercise it.
///
/// Closing and re-entering are ordered like Dekker's algorithm (all
/// `SeqCst`): a thread announces itself in `entering`, then looks at
/// `closed`; the closer sets `closed`, then waits until nobody is
/// announced. Either the returning thread sees the gate closed and parks, or
/// the closer sees it and waits (GIL released) until it has re-attached,
/// which happens before finalization can begin.
pub struct Gate {
    closed: AtomicBool,
    entering: AtomicUsize,
}

/// Proof that a thread passed the gate; dropping it (after re-attaching)
/// lets a waiting closer go on.
pub struct Ticket<'a>(&'a Gate);

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.0.entering.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Gate {
    pub const fn new() -> Self {
        Gate {
            closed: AtomicBool::new(false),
            entering: AtomicUsize::new(0),
        }
    }

    /// A ticket to re-attach, or None once the gate is closed.
    pub fn enter(&self) -> Option<Ticket<'_>> {
        self.entering.fetch_add(1, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            self.entering.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Ticket(self))
    }

    /// Close the gate and wait until every thread that passed it before
    /// has dropped its ticket. Call without the GIL: those threads need it.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        while self.entering.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Open it again, in a forked child: the interpreter is whole there,
    /// and the threads that held tickets in the parent do not exist (the
    /// forking thread held the GIL, so it held none).
    pub fn reset_after_fork(&self) {
        self.entering.store(0, Ordering::SeqCst);
        self.closed.store(false, Ordering::SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

static GATE: Gate = Gate::new();

/// `PyThread_get_thread_ident()` of the main thread, set by `taut._timer`
/// at import and in a forked child; only the main thread sees signals.
static MAIN_THREAD: AtomicU64 = AtomicU64::new(0);

/// True on the thread Python delivers signals to.
pub fn is_main_thread() -> bool {
    // SAFETY: reads the calling thread's id; needs no GIL.
    let me = unsafe { pyo3::ffi::PyThread_get_thread_ident() } as u64;
    MAIN_THREAD.load(Ordering::Acquire) == me
}

/// The main thread's `PyThread_get_thread_ident()` (0 before `taut._timer`
/// recorded it): a thread that lives as long as the process.
pub fn main_thread() -> u64 {
    MAIN_THREAD.load(Ordering::Acquire)
}

/// Record the main thread (see `MAIN_THREAD`).
#[pyfunction]
pub fn _set_main_thread(ident: u64) {
    MAIN_THREAD.store(ident, Ordering::Release);
}

thread_local! {
    /// True on the thread that closed the gate: it finalizes, so it passes.
    static CLOSED_HERE: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: a ticket only touches atomics of a `static`; it has no tie to the
// thread that took it, which is also the thread that drops it.
unsafe impl Send for Ticket<'_> {}

fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// Run `f` with the GIL released, like `Python::detach`, and re-attach only
/// while the interpreter is not shutting down (see the module docs).
pub fn detach<T, F>(py: Python<'_>, f: F) -> T
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    let (value, ticket) = py.detach(move || {
        let value = f();
        if CLOSED_HERE.with(Cell::get) {
            return (value, None);
        }
        match GATE.enter() {
            Some(ticket) => (value, Some(ticket)),
            None => park_forever(),
        }
    });
    // Re-attached: a waiting closer may go on.
    drop(ticket);
    value
}

/// From inside a [`detach`] closure, take the GIL for a moment to run `f`
/// (for example to look for a pending Ctrl-C), through the same gate.
pub fn attach_briefly<T>(f: impl FnOnce(Python<'_>) -> T) -> T {
    let ticket = if CLOSED_HERE.with(Cell::get) {
        None
    } else {
        match GATE.enter() {
            Some(ticket) => Some(ticket),
            None => park_forever(),
        }
    };
    let value = Python::attach(f);
    drop(ticket);
    value
}

/// Close the gate: from now on no other thread re-attaches after a GIL-free
/// wait. Called by taut's last `atexit` hook.
#[pyfunction]
pub fn _close_gil_gate(py: Python<'_>) {
    CLOSED_HERE.with(|c| c.set(true));
    py.detach(|| GATE.close());
}

/// Whether the gate is closed (diagnostics and tests).
#[pyfunction]
pub fn _gil_gate_closed() -> bool {
    GATE.is_closed()
}

/// In a forked child: the interpreter is whole again.
#[pyfunction]
pub fn _gil_gate_after_fork() {
    GATE.reset_after_fork();
    CLOSED_HERE.with(|c| c.set(false));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn open_gate_hands_out_tickets_and_close_waits_for_them() {
        let gate = Arc::new(Gate::new());
        let ticket = gate.enter().expect("open gate");
        let g = Arc::clone(&gate);
        let closer = thread::spawn(move || g.close());
        // The closer cannot finish while a ticket is out.
        while !gate.is_closed() {
            thread::yield_now();
        }
        thread::sleep(Duration::from_millis(20));
        assert!(!closer.is_finished());
        drop(ticket);
        closer.join().unwrap();
        assert!(gate.enter().is_none());
    }

    #[test]
    fn a_forked_child_forgets_tickets_of_threads_it_does_not_have() {
        let gate = Gate::new();
        // A fork while another thread held a ticket: it never drops it here.
        std::mem::forget(gate.enter().expect("open gate"));
        gate.reset_after_fork();
        assert!(gate.enter().is_some());
        // Nobody holds a ticket now, so closing returns instead of waiting
        // for ever (an exit hang in forked children).
        let (tx, rx) = std::sync::mpsc::channel();
        let g = Arc::new(gate);
        let closer = Arc::clone(&g);
        thread::spawn(move || {
            closer.close();
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_secs(30)).is_ok());
    }

    #[test]
    fn after_close_no_ticket_is_handed_out_under_contention() {
        let gate = Arc::new(Gate::new());
        let stop = Arc::new(AtomicBool::new(false));
        let takers: Vec<_> = (0..4)
            .map(|_| {
                let g = Arc::clone(&gate);
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    let mut late = 0u32;
                    while !stop.load(Ordering::SeqCst) {
                        let was_closed = g.is_closed();
                        if let Some(t) = g.enter() {
                            if was_closed {
                                late += 1;
                            }
                            drop(t);
                        }
                    }
                    late
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(5));
        gate.close();
        // Once close() returned, nobody holds a ticket and none is given out.
        for _ in 0..1000 {
            assert!(gate.enter().is_none());
        }
        stop.store(true, Ordering::SeqCst);
        for t in takers {
            assert_eq!(t.join().unwrap(), 0);
        }
    }
}
