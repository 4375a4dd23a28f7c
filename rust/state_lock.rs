//! A re-entrant lock that is taken and let go with an atomic operation each
//! when nobody waits for it, free of Python so that `cargo test` can
//! exercise it. `py_state_lock` makes it `taut._future._state_lock`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's number for `owner`: never 0, never reused.
    static THIS_THREAD: Cell<u64> = const { Cell::new(0) };
}

fn this_thread() -> u64 {
    THIS_THREAD.with(|id| {
        if id.get() == 0 {
            id.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
        }
        id.get()
    })
}

pub struct ReentrantLock {
    /// The holding thread (`this_thread`), 0 while free.
    owner: AtomicU64,
    /// How many times the holder took it; touched by the holder only.
    depth: AtomicUsize,
    /// Threads in `wait_until`: `exit` wakes one when it frees the lock.
    waiting: AtomicUsize,
    wait_room: Mutex<()>,
    freed: Condvar,
}

impl Default for ReentrantLock {
    fn default() -> Self {
        Self::new()
    }
}

impl ReentrantLock {
    pub const fn new() -> Self {
        ReentrantLock {
            owner: AtomicU64::new(0),
            depth: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            wait_room: Mutex::new(()),
            freed: Condvar::new(),
        }
    }

    /// Take the lock if it is free or this thread holds it already.
    pub fn try_enter(&self) -> bool {
        let me = this_thread();
        match self
            .owner
            .compare_exchange(0, me, Ordering::SeqCst, Ordering::Acquire)
        {
            Ok(_) => {
                self.depth.store(1, Ordering::Relaxed);
                true
            }
            Err(owner) if owner == me => {
                self.depth.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// Let go once; the caller holds the lock (see `is_owned`).
    pub fn exit(&self) {
        if self.depth.fetch_sub(1, Ordering::Relaxed) != 1 {
            return;
        }
        // SeqCst, as the waiter's count and its look at `owner`: either the
        // waiter sees the lock free, or this sees the waiter and wakes it
        // (under `wait_room`, so never between its look and its wait).
        self.owner.store(0, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let _room = self.wait_room.lock().unwrap_or_else(|e| e.into_inner());
            self.freed.notify_one();
        }
    }

    /// True if this thread holds it.
    pub fn is_owned(&self) -> bool {
        self.owner.load(Ordering::Acquire) == this_thread()
    }

    /// True if any thread holds it.
    pub fn is_locked(&self) -> bool {
        self.owner.load(Ordering::Acquire) != 0
    }

    /// Take the lock, waiting for it until `end` at the latest; true if taken.
    pub fn wait_until(&self, end: Instant) -> bool {
        let mut room = self.wait_room.lock().unwrap_or_else(|e| e.into_inner());
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let taken = loop {
            if self.try_enter() {
                break true;
            }
            let now = Instant::now();
            if now >= end {
                break false;
            }
            room = self
                .freed
                .wait_timeout(room, end - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn the_holder_takes_it_again_and_frees_it_at_its_last_exit() {
        let lock = ReentrantLock::new();
        assert!(lock.try_enter());
        assert!(lock.try_enter());
        assert!(lock.is_owned());
        lock.exit();
        assert!(lock.is_locked(), "one exit of two must not free it");
        lock.exit();
        assert!(!lock.is_locked());
        assert!(!lock.is_owned());
    }

    #[test]
    fn another_thread_cannot_take_it_while_it_is_held() {
        let lock = Arc::new(ReentrantLock::new());
        assert!(lock.try_enter());
        let other = Arc::clone(&lock);
        let seen = std::thread::spawn(move || {
            let taken = other.try_enter();
            let owned = other.is_owned();
            let waited = other.wait_until(Instant::now() + Duration::from_millis(20));
            (taken, owned, waited)
        })
        .join()
        .unwrap();
        assert_eq!(seen, (false, false, false));
        lock.exit();
    }

    #[test]
    fn a_waiter_is_woken_when_the_holder_lets_go() {
        let lock = Arc::new(ReentrantLock::new());
        assert!(lock.try_enter());
        let other = Arc::clone(&lock);
        let waiter = std::thread::spawn(move || {
            let start = Instant::now();
            let taken = other.wait_until(start + Duration::from_secs(30));
            let held_by_it = other.is_owned();
            other.exit();
            (taken, held_by_it, start.elapsed())
        });
        // Let the waiter reach its wait (no harm if it has not yet).
        std::thread::sleep(Duration::from_millis(50));
        lock.exit();
        let (taken, held_by_it, waited) = waiter.join().unwrap();
        assert!(taken && held_by_it);
        // Woken by the exit, not by its 30 s limit.
        assert!(waited < Duration::from_secs(10), "waited {waited:?}");
        assert!(!lock.is_locked());
    }
}
