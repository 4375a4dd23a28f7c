//! The one monotonic deadline timer thread of the process.
//!
//! Deadlines live in a binary min-heap keyed by their expiry time in
//! nanoseconds of the monotonic clock (the clock `time.monotonic()` reads).
//! Arming pushes onto the heap (O(log n)); cancelling only flips an atomic
//! state (O(1)) and leaves the heap slot behind ("lazy deletion"): the timer
//! thread discards it when it reaches the top, and the heap is compacted when
//! cancelled slots outnumber live ones, so arm+cancel loops cannot grow memory.
//!
//! At expiry the timer thread itself flips the entry's flag, wakes Rust
//! waiters and runs the entry's actions. It never takes the GIL and never
//! blocks on anything an action or a Python thread could hold for long, so
//! what it does happens on time while Python code holds the GIL. Actions run
//! under `catch_unwind`: a panicking action cannot kill the thread.
//!
//! After `fork()` only the forking thread exists in the child and any lock may
//! be frozen in the locked state. [`reset_after_fork`] therefore never touches
//! the parent's state: it leaks it and installs a fresh one, and the child's
//! timer thread starts lazily on the next [`arm`]. Entries armed before the
//! fork belong to the parent and never fire in the child.
//!
//! This module has no PyO3 dependency; it is tested with `cargo test`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::convert::Infallible;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering as AO};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// A user action run once on the timer thread at expiry.
pub type Action = Box<dyn FnOnce() + Send + 'static>;

// ---------------------------------------------------------------------------
// The clock
// ---------------------------------------------------------------------------

/// Nanoseconds on the clock `time.monotonic()` uses on this platform.
#[cfg(unix)]
pub fn now_ns() -> u64 {
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_UPTIME_RAW;
    #[cfg(not(any(target_os = "macos", target_os = "ios")))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; the clock id is supported on this platform.
    unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Fallback for platforms without `clock_gettime`: nanoseconds since the
/// first call (only self-consistent, not equal to `time.monotonic()`).
#[cfg(not(unix))]
pub fn now_ns() -> u64 {
    let (base, _) = epoch();
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A pair (Instant, nanoseconds) read back to back, to translate the opaque
/// `Instant` of the Rust API into the clock's nanoseconds.
fn epoch() -> (Instant, u64) {
    static EPOCH: OnceLock<(Instant, u64)> = OnceLock::new();
    *EPOCH.get_or_init(|| {
        // Bracket the clock read between two Instants and keep the tightest
        // bracket of a few tries, so the translation error stays sub-microsecond.
        let mut best: Option<(Duration, Instant, u64)> = None;
        for _ in 0..5 {
            let a = Instant::now();
            let ns = now_ns_raw();
            let b = Instant::now();
            let gap = b.saturating_duration_since(a);
            if best.is_none_or(|(g, _, _)| gap < g) {
                best = Some((gap, a + gap / 2, ns));
            }
        }
        let (_, instant, ns) = best.unwrap_or((Duration::ZERO, Instant::now(), 0));
        (instant, ns)
    })
}

#[cfg(unix)]
fn now_ns_raw() -> u64 {
    now_ns()
}

#[cfg(not(unix))]
fn now_ns_raw() -> u64 {
    0
}

/// The clock nanoseconds of an `Instant`, saturating at both ends.
pub fn instant_to_ns(at: Instant) -> u64 {
    let (base, base_ns) = epoch();
    if at >= base {
        let d = u64::try_from(at.duration_since(base).as_nanos()).unwrap_or(u64::MAX);
        base_ns.saturating_add(d)
    } else {
        let d = u64::try_from(base.duration_since(at).as_nanos()).unwrap_or(u64::MAX);
        base_ns.saturating_sub(d)
    }
}

/// Clock nanoseconds for absolute `time.monotonic()` seconds. NaN and
/// anything at or below zero map to 0 (already due), +inf and values beyond
/// the u64 range to `u64::MAX` (never due in practice: 584 years).
pub fn secs_to_ns(secs: f64) -> u64 {
    if secs.is_nan() || secs <= 0.0 {
        return 0;
    }
    let ns = secs * 1e9;
    if ns >= u64::MAX as f64 {
        u64::MAX
    } else {
        ns as u64
    }
}

// ---------------------------------------------------------------------------
// Entries
// ---------------------------------------------------------------------------

// The state of an entry and the head of its action stack share one word:
// nodes are 16-byte aligned, so the low four bits are free for flags. One
// compare-and-swap both decides the entry's fate and takes its actions, so
// an action pushed concurrently is either taken or refused, never lost.
const EXPIRED: usize = 1;
const CANCELLED: usize = 2;
/// Set (on top of EXPIRED) when `cancel()` is called after expiry: the owner
/// has left its scope, so late consumers of the expiry (an asynchronous
/// exception still queued for delivery) must drop it.
const CLOSED: usize = 4;
/// Set by a binding once it delivered an effect that may need undoing.
const DELIVERED: usize = 8;
const FATE: usize = EXPIRED | CANCELLED;
const FLAGS: usize = 0xF;
/// Once the entry is settled its word holds no action stack: the bits above
/// the flags then count the effects in progress that `cancel()` waits for
/// (see [`Entry::run_unless_closed`]).
const EFFECT: usize = FLAGS + 1;
/// How long `cancel()` waits for effects in progress, at most: far beyond a
/// system call even on a stalled machine, and a bound on the one wait that
/// can never end (an effect cut off by `fork()`).
const EFFECT_WAIT: Duration = Duration::from_secs(1);

enum Item {
    Action(Action),
    Waiter(Thread),
}

#[repr(align(16))]
struct Node {
    item: Item,
    next: *mut Node,
}

fn head_of(word: usize) -> *mut Node {
    (word & !FLAGS) as *mut Node
}

/// One armed deadline. Shared between the heap and its owners through `Arc`.
///
/// One machine word (24 bytes with the `Arc` counts), because millions may
/// be pending: the expiry time lives in the heap slot, and the action list
/// is a lock-free stack, so an entry needs no mutex or condition variable.
pub struct Entry {
    word: AtomicUsize,
}

// SAFETY: the node pointers in `word` are only created from Box, owned by the
// stack and freed by whoever takes the stack out; the items are Send.
unsafe impl Send for Entry {}
unsafe impl Sync for Entry {}

impl Entry {
    fn new() -> Self {
        Entry {
            word: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn flags(&self) -> usize {
        self.word.load(AO::Acquire) & FLAGS
    }

    /// True once the deadline has fired. One atomic load.
    #[inline]
    pub fn is_expired(&self) -> bool {
        self.flags() & EXPIRED != 0
    }

    /// True if `cancel()` won before expiry.
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.flags() & CANCELLED != 0
    }

    /// True while neither fired nor cancelled.
    #[inline]
    pub fn is_pending(&self) -> bool {
        self.flags() & FATE == 0
    }

    /// True if `cancel()` was called after the deadline had fired.
    pub fn is_closed(&self) -> bool {
        self.flags() & CLOSED != 0
    }

    /// Record that a binding delivered an effect for this expiry.
    pub fn mark_delivered(&self) {
        self.word.fetch_or(DELIVERED, AO::AcqRel);
    }

    /// True if [`Entry::mark_delivered`] was called.
    pub fn was_delivered(&self) -> bool {
        self.flags() & DELIVERED != 0
    }

    /// Decide the entry's fate (EXPIRED or CANCELLED) if still pending, and
    /// take its action stack in the same atomic step.
    fn settle(&self, fate: usize) -> Option<*mut Node> {
        let mut word = self.word.load(AO::Acquire);
        loop {
            if word & FATE != 0 {
                return None;
            }
            let settled = (word & FLAGS) | fate;
            match self
                .word
                .compare_exchange_weak(word, settled, AO::AcqRel, AO::Acquire)
            {
                Ok(_) => return Some(head_of(word)),
                Err(actual) => word = actual,
            }
        }
    }

    /// Cancel the deadline. Returns true if it had not fired (and now never
    /// will); its actions are dropped without running and its waiters wake.
    /// Returns false if it had already fired (or was cancelled before).
    pub fn cancel(&self) -> bool {
        match self.settle(CANCELLED) {
            Some(head) => {
                shared().cancelled.fetch_add(1, AO::Relaxed);
                run_list(head, false);
                true
            }
            None => {
                if self.is_expired() {
                    self.word.fetch_or(CLOSED, AO::AcqRel);
                    // An effect begun before CLOSED was set (see
                    // run_unless_closed) finishes first: a system call, so
                    // this waits microseconds, and never for the GIL. Not
                    // past EFFECT_WAIT: in a forked child the thread that
                    // was running it does not exist, and it never ends.
                    let started = Instant::now();
                    while self.word.load(AO::Acquire) & !FLAGS != 0
                        && started.elapsed() < EFFECT_WAIT
                    {
                        std::thread::yield_now();
                    }
                }
                false
            }
        }
    }

    /// Run `effect` now unless `cancel()` was called after expiry, and make a
    /// `cancel()` racing with it wait until it is done: once `cancel()` has
    /// returned, such an effect has happened already or never will. For
    /// effects the owner must rule out before it lets go of what they touch
    /// (a byte written to an fd it then closes, whose number the next open
    /// reuses; a signal that would reach the handler it puts back). Only for
    /// an entry that has fired (from its actions, or after expiry).
    pub fn run_unless_closed(&self, effect: impl FnOnce()) {
        struct InProgress<'a>(&'a AtomicUsize);
        impl Drop for InProgress<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(EFFECT, AO::AcqRel);
            }
        }
        let mut word = self.word.load(AO::Acquire);
        loop {
            if word & CLOSED != 0 || word & EXPIRED == 0 {
                return;
            }
            match self
                .word
                .compare_exchange_weak(word, word + EFFECT, AO::AcqRel, AO::Acquire)
            {
                Ok(_) => break,
                Err(actual) => word = actual,
            }
        }
        // Counted down even if the effect panics: cancel() must never wait
        // for good.
        let _in_progress = InProgress(&self.word);
        effect();
    }

    /// Run `action` on the timer thread at expiry, or at once on the calling
    /// thread if the deadline has already fired. Dropped unrun if cancelled.
    pub fn add_action(&self, action: Box<dyn FnOnce() + Send>) {
        if let Err(action) = self.try_add_action(action) {
            if self.is_expired() {
                run_guarded(action);
            }
        }
    }

    /// Like [`Entry::add_action`] but hands the action back instead of
    /// running it when the deadline has already fired or was cancelled, so a
    /// caller holding the GIL can run it after releasing it.
    pub fn try_add_action(&self, action: Action) -> Result<(), Action> {
        match self.push(Item::Action(action)) {
            Ok(()) => Ok(()),
            Err(Item::Action(action)) => Err(action),
            Err(Item::Waiter(_)) => unreachable!("pushed an action"),
        }
    }

    fn push(&self, item: Item) -> Result<(), Item> {
        let node = Box::into_raw(Box::new(Node {
            item,
            next: ptr::null_mut(),
        }));
        let mut word = self.word.load(AO::Acquire);
        loop {
            if word & FATE != 0 {
                // SAFETY: node came from Box::into_raw above and was never shared.
                let node = unsafe { Box::from_raw(node) };
                return Err(node.item);
            }
            // SAFETY: node is still exclusively ours until the CAS publishes it.
            unsafe { (*node).next = head_of(word) };
            let pushed = node as usize | (word & FLAGS);
            match self
                .word
                .compare_exchange_weak(word, pushed, AO::AcqRel, AO::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(actual) => word = actual,
            }
        }
    }

    /// Wait until the deadline fires (true), is cancelled (false) or
    /// `timeout` passes (false). Wakes by unpark, not by polling.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        wait_unchecked(|check| self.wait_interruptible(timeout, Duration::MAX, check))
    }

    /// [`Entry::wait`] that wakes at least every `slice` to call `check`
    /// (which may, for example, look for a pending KeyboardInterrupt); an
    /// error from `check` ends the wait and is returned.
    pub fn wait_interruptible<E>(
        &self,
        timeout: Option<Duration>,
        slice: Duration,
        mut check: impl FnMut() -> Result<(), E>,
    ) -> Result<bool, E> {
        if !self.is_pending() {
            return Ok(self.is_expired());
        }
        let start = Instant::now();
        let until = timeout.and_then(|t| start.checked_add(t));
        if self.push(Item::Waiter(thread::current())).is_err() {
            return Ok(self.is_expired());
        }
        loop {
            if !self.is_pending() {
                return Ok(self.is_expired());
            }
            let Some(pause) = next_pause(until, slice) else {
                return Ok(false);
            };
            thread::park_timeout(pause);
            if !self.is_pending() {
                return Ok(self.is_expired());
            }
            check()?;
        }
    }
}

/// How long a wait ending at `until` (None: never) sleeps next, waking at
/// least every `slice` (and every hour: some platforms' waits take no
/// longer); None once `until` has passed.
pub(crate) fn next_pause(until: Option<Instant>, slice: Duration) -> Option<Duration> {
    let left = match until {
        Some(u) => u
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())?,
        None => Duration::MAX,
    };
    Some(left.min(slice).min(Duration::from_secs(3600)))
}

/// A `wait_interruptible` run with no check at all (it cannot fail): the
/// plain `wait` of the waits that have both.
pub(crate) fn wait_unchecked<T>(
    wait: impl FnOnce(fn() -> Result<(), Infallible>) -> Result<T, Infallible>,
) -> T {
    match wait(|| Ok(())) {
        Ok(value) => value,
        Err(never) => match never {},
    }
}

/// Run (`fire`) or drop the actions of a taken stack in the order they were
/// added, waking every waiter either way.
fn run_list(mut head: *mut Node, fire: bool) {
    if head.is_null() {
        return;
    }
    if !fire {
        // Dropped, not run: their order does not matter (no Vec needed).
        while !head.is_null() {
            // SAFETY: as below, settle() gave this thread the whole list.
            let node = unsafe { Box::from_raw(head) };
            head = node.next;
            if let Item::Waiter(thread) = node.item {
                thread.unpark();
            }
        }
        return;
    }
    let mut items = Vec::new();
    while !head.is_null() {
        // SAFETY: every node came from Box::into_raw, and settle() gave this
        // thread sole ownership of the whole list.
        let node = unsafe { Box::from_raw(head) };
        head = node.next;
        items.push(node.item);
    }
    // The stack is LIFO: reverse so actions run in registration order.
    for item in items.into_iter().rev() {
        match item {
            Item::Action(action) => run_guarded(action),
            Item::Waiter(thread) => thread.unpark(),
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let word = *self.word.get_mut();
        if word & FATE != 0 {
            return; // settled: its actions were taken then (see EFFECT)
        }
        let mut head = head_of(word);
        while !head.is_null() {
            // SAFETY: &mut self means no one else can reach the list.
            let node = unsafe { Box::from_raw(head) };
            head = node.next;
        }
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("flags", &self.flags())
            .finish()
    }
}

fn run_guarded(action: Action) {
    // A panicking action must not take the timer thread (or a caller) down.
    if catch_unwind(AssertUnwindSafe(action)).is_err() {
        ACTION_PANICS.fetch_add(1, AO::Relaxed);
    }
}

static ACTION_PANICS: AtomicUsize = AtomicUsize::new(0);

/// How many actions panicked (and were contained) in this process.
pub fn action_panics() -> usize {
    ACTION_PANICS.load(AO::Relaxed)
}

// ---------------------------------------------------------------------------
// The heap and the thread
// ---------------------------------------------------------------------------

struct Slot {
    at_ns: u64,
    entry: Arc<Entry>,
}

impl PartialEq for Slot {
    fn eq(&self, other: &Self) -> bool {
        self.at_ns == other.at_ns
    }
}
impl Eq for Slot {}
impl PartialOrd for Slot {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Slot {
    // Reversed: BinaryHeap is a max-heap and we want the earliest on top.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at_ns.cmp(&self.at_ns)
    }
}

struct Heap {
    slots: BinaryHeap<Slot>,
    /// When the timer thread sleeps: the time it will wake (u64::MAX: until
    /// notified). 0 while it is awake, so arms need not notify it.
    sleeping_until: u64,
    shutdown: bool,
}

struct Shared {
    heap: Mutex<Heap>,
    wake: Condvar,
    /// Cancelled entries believed to be still in the heap (a heuristic that
    /// triggers compaction; exactness is not needed).
    cancelled: AtomicUsize,
    running: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    fn new() -> Self {
        Shared {
            heap: Mutex::new(Heap {
                slots: BinaryHeap::new(),
                sleeping_until: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            cancelled: AtomicUsize::new(0),
            running: AtomicBool::new(false),
            thread: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Heap> {
        // Nothing panics while holding this lock, but never let poisoning
        // turn into a panic in a caller.
        self.heap.lock().unwrap_or_else(|p| p.into_inner())
    }
}

static SHARED: AtomicPtr<Shared> = AtomicPtr::new(ptr::null_mut());

fn shared() -> &'static Shared {
    let p = SHARED.load(AO::Acquire);
    if !p.is_null() {
        // SAFETY: a published Shared is leaked and never freed.
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::new(Shared::new()));
    match SHARED.compare_exchange(ptr::null_mut(), fresh, AO::AcqRel, AO::Acquire) {
        // SAFETY: we just published it and never free it.
        Ok(_) => unsafe { &*fresh },
        Err(winner) => {
            // SAFETY: fresh lost the race and was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above, published and leaked.
            unsafe { &*winner }
        }
    }
}

/// Compaction starts only above this many heap slots: below it, cancelled
/// slots cost less than rebuilding.
const COMPACT_MIN: usize = 4096;
/// Expired entries fired per lock hold, so arms never wait long for the lock.
const FIRE_BATCH: usize = 256;

/// Arm a deadline at `at` (an `Instant`; saturating: any value is accepted).
pub fn arm(at: Instant) -> Arc<Entry> {
    arm_ns(instant_to_ns(at))
}

/// Arm a deadline at absolute clock nanoseconds (see [`now_ns`]).
pub fn arm_ns(at_ns: u64) -> Arc<Entry> {
    let entry = Arc::new(Entry::new());
    let sh = shared();
    if !sh.running.load(AO::Acquire) {
        start(sh);
    }
    let mut heap = sh.lock();
    let cancelled = sh.cancelled.load(AO::Relaxed);
    if heap.slots.len() >= COMPACT_MIN && cancelled * 2 > heap.slots.len() {
        compact(&mut heap, sh);
    }
    let notify = at_ns < heap.sleeping_until;
    heap.slots.push(Slot {
        at_ns,
        entry: Arc::clone(&entry),
    });
    if notify {
        // Wake the sleeper now; it recomputes its sleep from the new top.
        heap.sleeping_until = 0;
        drop(heap);
        sh.wake.notify_one();
    }
    entry
}

fn compact(heap: &mut Heap, sh: &Shared) {
    heap.slots.retain(|s| s.entry.is_pending());
    sh.cancelled.store(0, AO::Relaxed);
    let len = heap.slots.len();
    if heap.slots.capacity() > COMPACT_MIN && heap.slots.capacity() > 4 * len {
        heap.slots.shrink_to((2 * len).max(COMPACT_MIN));
    }
}

fn start(sh: &'static Shared) {
    let mut handle = sh.thread.lock().unwrap_or_else(|p| p.into_inner());
    if sh.running.load(AO::Acquire) {
        return;
    }
    sh.lock().shutdown = false;
    let spawned = thread::Builder::new()
        .name("taut-timer".into())
        .spawn(move || run(sh));
    // If the OS refuses a thread, the entry stays armed and the next arm tries
    // again; panicking here would take the caller down for nothing.
    if let Ok(h) = spawned {
        *handle = Some(h);
        sh.running.store(true, AO::Release);
    }
}

fn set_precise_timer_slack() {
    // Linux lets a sleeping thread oversleep by the "timer slack" (50 µs by
    // default) to batch wakeups; a deadline timer wants none of it.
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's slack value.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// The OS's own floor under the timer thread's lateness: on a fresh thread
/// with the same timer slack, `samples` waits of `delay_ns` each on a
/// condition variable nobody signals (the primitive `run` sleeps on), and
/// how late each woke, in ns. Whatever scheduling delay the machine adds to
/// every wake-up shows here with no timer code at all.
pub fn os_wait_lateness(delay_ns: u64, samples: usize) -> Vec<u64> {
    let probe = thread::Builder::new()
        .name("taut-wait-probe".into())
        .spawn(move || {
            set_precise_timer_slack();
            let (lock, never) = (Mutex::new(()), Condvar::new());
            let mut late = Vec::with_capacity(samples);
            for _ in 0..samples {
                let at = now_ns().saturating_add(delay_ns);
                let mut guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                // Spurious wake-ups: wait again for what is left.
                while let Some(left) = at.checked_sub(now_ns()).filter(|&l| l > 0) {
                    guard = never
                        .wait_timeout(guard, Duration::from_nanos(left))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                drop(guard);
                late.push(now_ns().saturating_sub(at));
            }
            late
        });
    // No thread to be had (the OS refused one): no samples rather than a panic.
    probe.ok().and_then(|h| h.join().ok()).unwrap_or_default()
}

fn run(sh: &'static Shared) {
    set_precise_timer_slack();
    let mut due: Vec<Arc<Entry>> = Vec::with_capacity(FIRE_BATCH);
    let mut heap = sh.lock();
    loop {
        if heap.shutdown {
            heap.sleeping_until = 0;
            return;
        }
        let now = now_ns();
        while due.len() < FIRE_BATCH {
            match heap.slots.peek() {
                Some(top) if top.at_ns <= now || !top.entry.is_pending() => {}
                _ => break,
            }
            let Some(slot) = heap.slots.pop() else { break };
            if slot.entry.is_pending() {
                due.push(slot.entry);
            } else {
                dec_cancelled(sh);
            }
        }
        if !due.is_empty() {
            heap.sleeping_until = 0;
            drop(heap);
            for entry in due.drain(..) {
                fire(&entry, sh);
            }
            heap = sh.lock();
            continue;
        }
        let wake_at = heap.slots.peek().map_or(u64::MAX, |s| s.at_ns);
        heap.sleeping_until = wake_at;
        heap = if wake_at == u64::MAX {
            sh.wake.wait(heap).unwrap_or_else(|p| p.into_inner())
        } else {
            // In OS-sized pieces: the loop re-reads the clock and the heap.
            let left = Duration::from_nanos(wake_at.saturating_sub(now));
            sh.wake
                .wait_timeout(heap, crate::clamp::os_wait(left))
                .unwrap_or_else(|p| p.into_inner())
                .0
        };
        heap.sleeping_until = 0;
    }
}

fn dec_cancelled(sh: &Shared) {
    let _ = sh
        .cancelled
        .fetch_update(AO::Relaxed, AO::Relaxed, |c| Some(c.saturating_sub(1)));
}

fn fire(entry: &Entry, sh: &Shared) {
    match entry.settle(EXPIRED) {
        Some(head) => run_list(head, true),
        // cancel() won the race after the pop; the slot is gone already.
        None => dec_cancelled(sh),
    }
}

/// Stop the timer thread and wait for it to exit (interpreter shutdown).
/// Pending entries stay armed; the next [`arm`] starts a new thread.
pub fn shutdown() {
    let sh = shared();
    let mut handle = sh.thread.lock().unwrap_or_else(|p| p.into_inner());
    {
        let mut heap = sh.lock();
        heap.shutdown = true;
    }
    sh.wake.notify_all();
    if let Some(h) = handle.take() {
        let _ = h.join();
    }
    sh.running.store(false, AO::Release);
}

/// Forget the parent's timer in a forked child (call first thing in the child).
///
/// Leaks the old state on purpose: its locks may be frozen in the locked
/// state by threads that do not exist in the child, so it must never be
/// touched again. The child's timer starts lazily on its next [`arm`].
pub fn reset_after_fork() {
    let fresh = Box::into_raw(Box::new(Shared::new()));
    SHARED.store(fresh, AO::Release);
}

/// Number of heap slots (pending plus not yet discarded cancelled ones).
pub fn heap_len() -> usize {
    shared().lock().slots.len()
}

/// Allocated heap slots (tests check that compaction gives memory back).
#[cfg(test)]
fn heap_capacity() -> usize {
    shared().lock().slots.capacity()
}

/// Arm a lead: `action` runs `lead_ns` before `entry`'s deadline `at_ns`
/// (at once if that is past), unless `entry` was cancelled first. Returns
/// the lead's own entry. Cancelling `entry` cancels the lead, through an
/// action of `entry`'s that is dropped unrun then: a deadline that ends in
/// time leaves no lead behind in the heap.
pub fn arm_lead(entry: &Entry, at_ns: u64, lead_ns: u64, action: Action) -> Arc<Entry> {
    /// Cancels the lead when dropped, run or not.
    struct CancelLead(Arc<Entry>);
    impl Drop for CancelLead {
        fn drop(&mut self) {
            self.0.cancel();
        }
    }
    let lead = arm_ns(at_ns.saturating_sub(lead_ns));
    lead.add_action(action);
    let cancel = CancelLead(Arc::clone(&lead));
    entry.add_action(Box::new(move || drop(cancel)));
    lead
}

/// Whether the timer thread of this process is running.
pub fn is_running() -> bool {
    shared().running.load(AO::Acquire)
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::mpsc;

    #[test]
    fn os_wait_probe_waits_out_every_sample() {
        // Each sample ends only once its wait is over: three 2 ms waits
        // cannot take less than 6 ms, whatever the machine's load.
        let begun = Instant::now();
        let late = os_wait_lateness(2_000_000, 3);
        assert_eq!(late.len(), 3);
        assert!(begun.elapsed() >= Duration::from_millis(6));
    }

    fn in_ms(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn a_lead_fires_its_lead_before_the_deadline() {
        let at = now_ns() + 60_000_000_000;
        let entry = arm_ns(at);
        let (tx, rx) = mpsc::channel();
        let lead = arm_lead(
            &entry,
            at,
            59_950_000_000,
            Box::new(move || tx.send(()).unwrap()),
        );
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the lead fired 50 ms in, a minute before the deadline");
        assert!(lead.is_expired() && entry.is_pending());
        assert!(entry.cancel());
    }

    #[test]
    fn cancelling_the_deadline_cancels_its_lead() {
        let at = now_ns() + 60_000_000_000;
        let entry = arm_ns(at);
        let lead = arm_lead(&entry, at, 1_000_000_000, Box::new(|| {}));
        assert!(lead.is_pending());
        assert!(entry.cancel());
        assert!(lead.is_cancelled(), "the lead stayed armed for a minute");
    }

    #[test]
    fn fires_and_flips_flag() {
        let e = arm(in_ms(20));
        assert!(!e.is_expired());
        assert!(e.wait(Some(Duration::from_secs(10))));
        assert!(e.is_expired());
        assert!(!e.cancel(), "cancel after expiry reports it had fired");
        assert!(e.is_closed());
    }

    #[test]
    fn state_flags_report_only_their_own_bit() {
        let e = arm(in_ms(60_000));
        assert!(e.is_pending() && !e.is_expired() && !e.is_cancelled());
        assert!(!e.is_closed() && !e.was_delivered());
        e.mark_delivered();
        assert!(e.was_delivered());
        assert!(e.is_pending(), "delivered is not a fate");
        assert!(!e.is_expired() && !e.is_cancelled() && !e.is_closed());
        assert!(e.cancel());
        assert!(e.is_cancelled() && !e.is_pending() && !e.is_expired() && !e.is_closed());
        assert!(e.was_delivered(), "cancel keeps the other flags");

        let due = arm(Instant::now() - Duration::from_secs(1));
        assert!(due.wait(Some(Duration::from_secs(10))));
        assert!(due.is_expired() && !due.is_pending() && !due.is_cancelled());
        assert!(!due.is_closed() && !due.was_delivered());
        assert!(!due.cancel());
        assert!(due.is_closed() && due.is_expired() && !due.is_cancelled());
    }

    #[test]
    fn cancel_prevents_actions_and_wakes_waiters() {
        let e = arm(in_ms(60_000));
        let ran = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&ran);
        e.add_action(Box::new(move || r.store(true, AO::SeqCst)));
        let e2 = Arc::clone(&e);
        let waiter = thread::spawn(move || e2.wait(None));
        thread::sleep(Duration::from_millis(20));
        assert!(e.cancel());
        assert!(!e.cancel(), "second cancel reports false");
        assert!(!waiter.join().unwrap(), "a cancelled wait returns false");
        assert!(!e.is_expired());
        assert!(e.is_cancelled());
        assert!(!ran.load(AO::SeqCst));
    }

    #[test]
    fn effects_run_until_cancel_and_cancel_waits_for_one_in_progress() {
        let e = arm(in_ms(0));
        assert!(e.wait(Some(Duration::from_secs(30))));
        let mut ran = false;
        e.run_unless_closed(|| ran = true);
        assert!(ran, "fired, not cancelled: the effect runs");

        // An effect in progress on another thread when cancel() comes.
        let (started_tx, started_rx) = mpsc::channel();
        let finished = Arc::new(AtomicBool::new(false));
        let effect = {
            let (e, finished) = (Arc::clone(&e), Arc::clone(&finished));
            std::thread::spawn(move || {
                e.run_unless_closed(|| {
                    started_tx.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(200));
                    finished.store(true, AO::Release);
                })
            })
        };
        started_rx.recv().unwrap();
        assert!(!e.cancel(), "it had fired");
        assert!(
            finished.load(AO::Acquire),
            "cancel() returned while the effect was still running"
        );
        effect.join().unwrap();

        let mut late = false;
        e.run_unless_closed(|| late = true);
        assert!(!late, "after cancel() returned no effect runs");
        assert!(!e.is_cancelled() && e.is_closed());
    }

    #[test]
    fn cancel_stops_waiting_for_an_effect_that_never_ends() {
        // As in a forked child, where the thread running the effect is gone.
        let e = arm(in_ms(0));
        assert!(e.wait(Some(Duration::from_secs(30))));
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let effect = {
            let e = Arc::clone(&e);
            std::thread::spawn(move || {
                e.run_unless_closed(|| {
                    started_tx.send(()).unwrap();
                    let _ = release_rx.recv();
                })
            })
        };
        started_rx.recv().unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        let canceller = {
            let e = Arc::clone(&e);
            std::thread::spawn(move || done_tx.send(e.cancel()).unwrap())
        };
        let cancelled = done_rx.recv_timeout(Duration::from_secs(30));
        release_tx.send(()).unwrap();
        effect.join().unwrap();
        canceller.join().unwrap();
        assert_eq!(cancelled, Ok(false), "cancel() waited for good");
    }

    #[test]
    fn an_effect_that_panics_does_not_leave_cancel_waiting() {
        let e = arm(in_ms(0));
        assert!(e.wait(Some(Duration::from_secs(30))));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.run_unless_closed(|| panic!("taut test: a panicking effect"))
        }));
        assert!(panicked.is_err());
        assert!(!e.cancel()); // returns: the effect was counted down
    }

    #[test]
    fn effects_never_run_on_a_pending_or_cancelled_entry() {
        let e = arm(in_ms(60_000));
        let mut ran = false;
        e.run_unless_closed(|| ran = true);
        assert!(!ran, "not fired yet");
        assert!(e.cancel());
        e.run_unless_closed(|| ran = true);
        assert!(!ran, "cancelled before expiry");
    }

    #[test]
    fn fires_in_deadline_order() {
        let (tx, rx) = mpsc::channel();
        let base = Instant::now() + Duration::from_millis(30);
        let order = [7u64, 2, 9, 0, 5, 3, 8, 1, 6, 4];
        let mut keep = Vec::new();
        for &i in &order {
            let e = arm(base + Duration::from_millis(3 * i));
            let tx = tx.clone();
            e.add_action(Box::new(move || tx.send(i).unwrap()));
            keep.push(e);
        }
        let got: Vec<u64> = (0..order.len())
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn actions_run_in_registration_order_and_after_expiry_inline() {
        let e = arm(in_ms(10));
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..5 {
            let log = Arc::clone(&log);
            e.add_action(Box::new(move || log.lock().unwrap().push(i)));
        }
        assert!(e.wait(Some(Duration::from_secs(10))));
        // Already expired: runs at once on this thread.
        let me = thread::current().id();
        let log2 = Arc::clone(&log);
        e.add_action(Box::new(move || {
            assert_eq!(thread::current().id(), me);
            log2.lock().unwrap().push(99);
        }));
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 4, 99]);
        // try_add_action hands it back instead.
        assert!(e.try_add_action(Box::new(|| {})).is_err());
    }

    #[test]
    fn actions_run_on_the_timer_thread() {
        let e = arm(in_ms(5));
        let (tx, rx) = mpsc::channel();
        e.add_action(Box::new(move || {
            tx.send(thread::current().name().map(String::from)).unwrap()
        }));
        let name = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(name.as_deref(), Some("taut-timer"));
    }

    #[test]
    fn panicking_action_does_not_kill_the_timer() {
        let before = action_panics();
        let e = arm(in_ms(5));
        e.add_action(Box::new(|| panic!("boom from a test action")));
        let flag = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&flag);
        e.add_action(Box::new(move || f.store(true, AO::SeqCst)));
        assert!(e.wait(Some(Duration::from_secs(10))));
        // The action after the panicking one still ran...
        let deadline = Instant::now() + Duration::from_secs(10);
        while !flag.load(AO::SeqCst) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
        assert!(flag.load(AO::SeqCst));
        assert!(action_panics() > before);
        // ...and later deadlines still fire.
        let later = arm(in_ms(5));
        assert!(later.wait(Some(Duration::from_secs(10))));
    }

    #[test]
    fn past_and_extreme_instants_are_safe() {
        let past = arm(Instant::now() - Duration::from_secs(1));
        assert!(past.wait(Some(Duration::from_secs(10))));
        let far = arm(crate::clamp::saturating_add(Instant::now(), Duration::MAX));
        assert!(!far.wait(Some(Duration::from_millis(10))));
        assert!(far.cancel());
        assert!(arm_ns(u64::MAX).cancel());
        assert_eq!(std::mem::size_of::<Entry>(), 8);
    }

    #[test]
    fn wait_times_out_and_reports_false() {
        let e = arm(in_ms(60_000));
        let t0 = Instant::now();
        assert!(!e.wait(Some(Duration::from_millis(30))));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert!(e.cancel());
    }

    #[test]
    fn wait_interruptible_returns_check_error() {
        let e = arm(in_ms(60_000));
        let mut calls = 0;
        let r: Result<bool, &str> = e.wait_interruptible(None, Duration::from_millis(2), || {
            calls += 1;
            if calls == 3 {
                Err("interrupted")
            } else {
                Ok(())
            }
        });
        assert_eq!(r, Err("interrupted"));
        assert!(e.cancel());
    }

    #[test]
    fn earlier_arm_wakes_a_sleeping_timer() {
        let far = arm(in_ms(60_000));
        thread::sleep(Duration::from_millis(20)); // let the timer sleep on `far`
        let near = arm(in_ms(10));
        let t0 = Instant::now();
        assert!(near.wait(Some(Duration::from_secs(10))));
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(far.cancel());
    }

    /// Tests that arm tens of thousands of entries and then measure the
    /// (process-wide) heap take this, so they do not see each other's slots.
    static HEAP_HEAVY: Mutex<()> = Mutex::new(());

    fn heap_heavy() -> MutexGuard<'static, ()> {
        HEAP_HEAVY.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn cancelled_slots_behind_a_pending_deadline_are_compacted() {
        // The timer thread drops cancelled slots only when they reach the top
        // of the heap. Behind a pending far-away deadline they never do: only
        // compaction (on arm) removes them, and it keeps every pending slot.
        let _heavy = heap_heavy();
        let n = 100_000u64;
        let base = in_ms(600_000);
        let anchor = arm(base);
        let kept: Vec<_> = (1..=n / 10)
            .map(|i| arm(base + Duration::from_nanos(i)))
            .collect();
        let gone: Vec<_> = (0..n)
            .map(|i| arm(base + Duration::from_secs(1) + Duration::from_nanos(i)))
            .collect();
        assert!(heap_capacity() as u64 > n);
        for e in &gone {
            assert!(e.cancel());
        }
        drop(gone);
        for _ in 0..n {
            arm(base + Duration::from_secs(2)).cancel();
        }
        // Without compaction the heap would hold 2n + n/10 slots of ours.
        assert!((heap_len() as u64) < n, "not compacted, len {}", heap_len());
        assert!(
            (heap_capacity() as u64) < n,
            "memory kept, capacity {}",
            heap_capacity()
        );
        assert!(anchor.is_pending() && kept.iter().all(|e| e.is_pending()));
        for e in kept.iter().chain([&anchor]) {
            assert!(e.cancel());
        }
    }

    #[test]
    fn many_pending_then_cancelled_are_compacted() {
        let _heavy = heap_heavy();
        let n = 200_000;
        let base = in_ms(600_000);
        let entries: Vec<_> = (0..n)
            .map(|i| arm(base + Duration::from_nanos(i as u64)))
            .collect();
        assert!(heap_len() >= n);
        for e in &entries {
            assert!(e.cancel());
        }
        drop(entries);
        // Arm+cancel churn must not grow the heap without bound.
        for _ in 0..(2 * n) {
            let e = arm(base);
            e.cancel();
        }
        assert!(heap_len() < n, "heap compacted, len {}", heap_len());
    }

    #[test]
    fn many_pending_fire() {
        let _heavy = heap_heavy();
        let n = 20_000u64;
        let count = Arc::new(AtomicU64::new(0));
        let base = in_ms(20);
        let entries: Vec<_> = (0..n)
            .map(|i| {
                let e = arm(base + Duration::from_micros(i % 500));
                let c = Arc::clone(&count);
                e.add_action(Box::new(move || {
                    c.fetch_add(1, AO::Relaxed);
                }));
                e
            })
            .collect();
        for e in &entries {
            assert!(e.wait(Some(Duration::from_secs(20))));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while count.load(AO::Relaxed) < n && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(count.load(AO::Relaxed), n);
    }

    #[test]
    fn concurrent_arm_cancel_from_threads() {
        // Four threads race cancels against the timer thread: a cancel that
        // wins drops the action unrun; one that loses reports the deadline as
        // fired, and the action runs exactly once.
        let handles: Vec<_> = (0..4)
            .map(|t| {
                thread::spawn(move || {
                    for i in 0..5_000u64 {
                        let e = arm(Instant::now() + Duration::from_micros((i * 7 + t) % 300));
                        let ran = Arc::new(AtomicU64::new(0));
                        let r = Arc::clone(&ran);
                        e.add_action(Box::new(move || {
                            r.fetch_add(1, AO::SeqCst);
                        }));
                        if i % 2 == 0 {
                            if e.cancel() {
                                assert!(e.is_cancelled() && !e.is_expired());
                                assert!(!e.wait(Some(Duration::ZERO)));
                                assert_eq!(ran.load(AO::SeqCst), 0, "cancelled, yet ran");
                            } else {
                                assert!(e.is_expired() && !e.is_cancelled() && e.is_closed());
                                wait_for_count(&ran, 1);
                            }
                        } else {
                            assert!(e.wait(Some(Duration::from_secs(20))));
                            assert!(e.is_expired());
                            wait_for_count(&ran, 1);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    /// Wait (bounded) for an action counter to reach `n`, then check it stays
    /// there: actions run on the timer thread, after the entry's flag flips.
    fn wait_for_count(count: &AtomicU64, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while count.load(AO::SeqCst) < n && Instant::now() < deadline {
            thread::yield_now();
        }
        assert_eq!(count.load(AO::SeqCst), n);
    }

    #[test]
    fn now_ns_matches_instant_translation() {
        let a = instant_to_ns(Instant::now());
        let b = now_ns();
        let diff = a.abs_diff(b);
        assert!(diff < 50_000_000, "clock translation off by {diff} ns");
        assert_eq!(secs_to_ns(f64::NAN), 0);
        assert_eq!(secs_to_ns(-1.0), 0);
        assert_eq!(secs_to_ns(f64::INFINITY), u64::MAX);
        assert_eq!(secs_to_ns(1.5), 1_500_000_000);
    }
}
