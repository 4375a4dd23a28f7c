//! The bounded FIFO worker pool: the queue, the worker ceiling and the
//! bookkeeping that decides when a worker must be started, woken or retired.
//!
//! This file knows nothing about Python. Threads are started by the caller
//! (the Python layer starts `threading.Thread`s whose target runs the worker
//! loop), so `submit` only *tells* the caller to start one. Every method is
//! short and never calls out while holding the lock, so it is safe to call
//! with the GIL held: no holder of this lock ever waits for the GIL.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The spin window: how long a worker that ran out of work keeps looking
/// before it parks, how long `result()` spins for a short call, and the gap
/// between calls under which a pool counts as hot ([`Pool::is_hot`]). It is
/// [`WAKES_PER_WINDOW`] wake-ups of a parked thread as measured on this
/// machine ([`Pool::spin_window`]), never shorter than this: a call that
/// comes within the window starts at once instead of paying a wake-up.
/// Spinning yields the CPU often, so it costs little on a busy machine.
pub const SPIN_FLOOR: Duration = Duration::from_micros(50);

/// The longest spin window. A loaded machine's wake-ups include waiting for
/// a CPU; spinning longer there would take the CPU from the threads that
/// submit and finish calls.
pub const SPIN_CEILING: Duration = Duration::from_micros(250);

const FLOOR_NS: u64 = SPIN_FLOOR.as_nanos() as u64;
const CEILING_NS: u64 = SPIN_CEILING.as_nanos() as u64;

/// The spin window in measured wake-ups. A `submit().result()` loop through
/// a parked worker pays two (the worker's, then the waiter's) plus the call
/// itself; with a window shorter than that such a loop never counts as hot
/// and never stops paying them. Seen on a machine whose wake-ups took 58 µs:
/// with a fixed 50 µs window the round trip was 0.92x the standard
/// library's, with 150 µs 0.05x, and CPU per request under paced loads held.
const WAKES_PER_WINDOW: u64 = 3;

/// The range the wake-up estimate keeps to (`record_wake`): from half the
/// wake-up of a floor-sized window to that of the ceiling, so that it never
/// has far to come back.
const WAKE_LOWEST_NS: u64 = FLOOR_NS / WAKES_PER_WINDOW / 2;
const WAKE_HIGHEST_NS: u64 = CEILING_NS / WAKES_PER_WINDOW + 1;

/// How long a spinning worker that found work waits, still spinning, for
/// the submitter to let go of the GIL before it asks for it. The submitter
/// holds the GIL as it queues the call and usually gives it up a moment
/// later (to wait for the result, or in its event loop's select). A worker
/// that asks for the GIL before that sleeps in CPython's GIL wait, and the
/// futex wake-up that ends the sleep costs tens of microseconds on these
/// machines: the same order as the whole round trip. A waiter in
/// `spin_for_release` says when it let go ([`Pool::offer_gil`]), so a
/// `submit().result()` round trip never waits for this long.
pub const GIL_HANDOFF_WAIT: Duration = Duration::from_micros(4);

/// The averages of the gap between submissions and of a call's run time
/// (`is_hot`, `calls_are_short`) only say whether they are below the spin
/// window. A sample above this many windows counts as that much, and a
/// fresh pool starts there: one long pause cools a hot pool at once (a step
/// from zero lands at the window), and a few close calls heat a cold one
/// (five, from the cap). Without the cap a single idle second took dozens
/// of calls to forget, and a fresh pool's first calls all paid a parked
/// thread's wake-up.
const AVERAGE_CAP_WINDOWS: u64 = 4;

/// `Pool::measured_ns` before any call ran.
const UNKNOWN: u64 = u64::MAX;

/// Spin until `done()` or `limit` passed, yielding the CPU now and then.
pub fn spin_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut turns = 0u32;
    loop {
        if done() {
            return true;
        }
        turns = turns.wrapping_add(1);
        if turns % 32 == 0 {
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Every position up to this one is reported to a tracked job as it gets
/// there; above it only the round ones of [`notice_positions`].
pub const EXACT_POSITIONS: usize = 10;

/// The queue positions a tracked job is told about as it moves up: each one
/// from [`EXACT_POSITIONS`] down, above that 20, 50, 100, 200, 500, 1000, ...
/// A waiting caller wants the count-down near the front exactly; far back,
/// a new number per start is noise (and N waiting jobs told of each of N
/// starts is N*N/2 notices), so far back the number changes by a
/// readable step. Each job so hears O(log position) notices.
fn notice_positions() -> impl Iterator<Item = usize> {
    let round = (1u32..).flat_map(|decade| {
        let unit = 10usize.saturating_pow(decade);
        [2 * unit, 5 * unit, 10 * unit]
    });
    (1..=EXACT_POSITIONS).chain(round.take_while(|&p| p < usize::MAX / 10))
}

/// `(seq, position)` of tracked jobs whose queue position changed.
pub type PositionUpdates = Vec<(u64, usize)>;

/// Why a submission was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused<J> {
    /// `shutdown` was called; the job is handed back.
    Shutdown(J),
    /// The bounded queue is full; the job is handed back.
    Full(J),
}

/// What the pool decided about a new submission.
#[derive(Debug, PartialEq, Eq)]
pub struct Submitted {
    /// The job's sequence number, its identity inside the pool.
    pub seq: u64,
    /// How many worker threads this submission asked for: usually 0 or 1,
    /// more when earlier calls left their wake-ups owed (`submit_waking`)
    /// and no parked worker is left to wake for them.
    pub spawn: usize,
    /// Worker starts asked for and not claimed yet (`claim_start`), this
    /// submission's included: those an interrupted caller never got to are
    /// claimed by the next one.
    pub unclaimed: usize,
    /// `Some(position)` (1-based) when the job cannot start at once.
    pub waiting_at: Option<usize>,
}

/// What a worker gets when it asks for work.
#[derive(Debug, PartialEq, Eq)]
pub enum Take<J> {
    /// Run this job; `updates` are the new positions of tracked waiting jobs.
    Job {
        seq: u64,
        job: J,
        tracked: bool,
        updates: Vec<(u64, usize)>,
    },
    /// No job now (from `try_take`, `done_and_try_take`, `claim_woken`). The worker is
    /// already counted as idle and must park next (`park_then_claim`): it is counted
    /// before it lets go of the GIL, so a caller that was waiting for its
    /// result and submits again at once reuses it instead of starting a
    /// thread (CPython's test_idle_thread_reuse).
    Empty,
    /// The worker must exit: idle too long, above the ceiling, or shut down.
    Exit,
    /// There is work (from `park_then_claim`): the worker is counted as on
    /// its way (idle, not parked) and takes it with `claim_woken` once it
    /// holds the GIL again. A job claimed by a thread that still waits for
    /// the GIL could not run while the thread holding the GIL, finding the
    /// queue empty, goes to sleep: every call would cost two wake-ups.
    Woken,
}

/// What a top-up decided, under the pool's lock: worker threads the caller
/// must start, parked workers to notify once the lock is released, and
/// whether a wake-up was left owed (`submit_waking`).
#[derive(Debug, Default)]
struct TopUp {
    spawn: usize,
    notify: usize,
    owed: bool,
}

/// Counters for `stats()`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub max_workers: usize,
    pub workers: usize,
    pub idle: usize,
    pub running: usize,
    pub queued: usize,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub abandoned: u64,
}

struct Queued<J> {
    seq: u64,
    job: J,
}

struct State<J> {
    queue: VecDeque<Queued<J>>,
    next_seq: u64,
    max_workers: usize,
    max_queue: usize,
    /// Workers counted against the ceiling: started (or about to be) and not
    /// retired or abandoned.
    workers: usize,
    /// Workers out of work: parked on the condvar, spinning, or on their way
    /// to park. All but the parked ones look at the queue before they park.
    idle: usize,
    /// Idle workers blocked on the `work` condvar (notified ones included
    /// until they are awake again). Only these can be woken by a notify.
    parked: usize,
    /// Parked workers notified for a job that are not awake yet; never more
    /// than `parked`, so a notify is never counted without a thread to wake.
    notified: usize,
    /// Worker threads the caller was told to start that have not arrived.
    starting: usize,
    /// Of those, the starts no caller has claimed yet (`claim_start`). The
    /// caller asked to start a thread may be interrupted before it does
    /// (a Ctrl-C lands between any two bytecodes): the start stays owed
    /// here, and whoever submits next claims it, instead of the pool
    /// waiting for good for a thread nobody starts.
    unclaimed: usize,
    running: usize,
    shutdown: bool,
    stats: Stats,
    /// Tracked jobs still queued: seq -> last position reported.
    tracked: BTreeMap<u64, usize>,
    /// When the last job was submitted (`Pool::now_ns`).
    last_submit_ns: u64,
    /// Idle workers spinning right now (at most one).
    spinning: usize,
    /// How well spinning has paid lately (see `SpinRecord`).
    spin_record: SpinRecord,
}

/// Whether a worker's spin for the next call has been paying off. Calls
/// arriving close together on average (`is_hot`) is not enough: a server
/// whose requests come in bursts (gRPC's polling thread, say) has a short
/// average gap, yet a spin after the burst finds nothing and takes the CPU
/// from the threads that would make the next request. A spin that found
/// work scores a point, one that found none loses four, and the worker
/// spins only while the score is not negative; each spin skipped gives a
/// point back, so a load that becomes spin-friendly again is tried again
/// after a few parks. Spinning thus continues only where at least about
/// four spins in five find work.
#[derive(Debug, Default, Clone, Copy)]
struct SpinRecord {
    score: i32,
}

impl SpinRecord {
    const MAX: i32 = 8;
    const MISS: i32 = 4;

    fn worth_spinning(&mut self) -> bool {
        if self.score >= 0 {
            return true;
        }
        self.score += 1; // skipped: try again after a few
        false
    }

    fn spun(&mut self, found_work: bool) {
        self.score = if found_work {
            (self.score + 1).min(Self::MAX)
        } else {
            self.score - Self::MISS
        };
    }
}

/// The pool. `J` is the job type: Python work items in the bindings,
/// plain values in the tests.
pub struct Pool<J> {
    state: Mutex<State<J>>,
    /// The queue's length, readable without the lock by spinning workers.
    queued: AtomicUsize,
    /// Bumped each time a worker comes back for work without the GIL, so a
    /// thread waiting for a result knows when to try taking the GIL.
    released: AtomicU64,
    /// Bumped by a thread that let go of the GIL to wait for a result of
    /// this pool (see [`GIL_HANDOFF_WAIT`]).
    gil_offered: AtomicU64,
    /// How long a worker with nothing to do spins before it parks, when the
    /// pool is hot, if not the spin window (the tests stretch it).
    worker_spin: Option<Duration>,
    /// [`GIL_HANDOFF_WAIT`] (the tests stretch it).
    gil_handoff_wait: Duration,
    /// Signalled when a job arrives or a worker must exit.
    work: Condvar,
    /// Signalled when the bounded queue gains room or the pool shuts down.
    room: Condvar,
    /// Smoothed nanoseconds between submissions (updated under the lock,
    /// read without it): spinning pays only when the next call is due soon.
    gap_ns: AtomicU64,
    /// Smoothed nanoseconds a call runs, reported by the bindings.
    service_ns: AtomicU64,
    /// `service_ns` as it would be had it started from the first call's
    /// own run time rather than from the cap; `UNKNOWN` until a call ran.
    /// For `calls_are_long`, which must not take a fresh pool's first
    /// calls for long (`service_ns` needs five short calls to come down).
    measured_ns: AtomicU64,
    /// Nanoseconds from a notify to the parked worker it woke running
    /// again, a running median (`record_wake`): the machine's wake-up cost,
    /// which sets the spin window.
    wake_ns: AtomicU64,
    /// When the last notify was sent (`now_ns`), for the first worker it
    /// wakes to measure its wake-up; 0 once taken.
    notified_ns: AtomicU64,
    epoch: Instant,
}

impl<J> Pool<J> {
    pub fn new(max_workers: usize, max_queue: usize) -> Self {
        Pool {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                next_seq: 1,
                max_workers,
                max_queue,
                workers: 0,
                idle: 0,
                parked: 0,
                notified: 0,
                starting: 0,
                unclaimed: 0,
                running: 0,
                shutdown: false,
                stats: Stats::default(),
                tracked: BTreeMap::new(),
                last_submit_ns: 0,
                spinning: 0,
                spin_record: SpinRecord::default(),
            }),
            queued: AtomicUsize::new(0),
            released: AtomicU64::new(0),
            gil_offered: AtomicU64::new(0),
            worker_spin: None,
            gil_handoff_wait: GIL_HANDOFF_WAIT,
            work: Condvar::new(),
            room: Condvar::new(),
            gap_ns: AtomicU64::new(AVERAGE_CAP_WINDOWS * FLOOR_NS),
            service_ns: AtomicU64::new(AVERAGE_CAP_WINDOWS * FLOOR_NS),
            measured_ns: AtomicU64::new(UNKNOWN),
            // Until a wake-up is measured the window is the floor: a pool
            // that spins too little parks, and so measures its wake-ups; one
            // that spun too much would never park to learn it should not.
            wake_ns: AtomicU64::new(FLOOR_NS / WAKES_PER_WINDOW),
            notified_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Nanoseconds since the pool was made (its own clock for the averages).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The spin window (see [`SPIN_FLOOR`]): [`WAKES_PER_WINDOW`] of this
    /// pool's measured wake-ups, within [`SPIN_FLOOR`]..=[`SPIN_CEILING`].
    pub fn spin_window(&self) -> Duration {
        Duration::from_nanos(self.window_ns())
    }

    fn window_ns(&self) -> u64 {
        (WAKES_PER_WINDOW * self.wake_ns.load(Ordering::Relaxed)).clamp(FLOOR_NS, CEILING_NS)
    }

    /// One step of the averages of `gap_ns` and `service_ns`: an
    /// exponential moving average with weight 1/4 of samples capped at
    /// [`AVERAGE_CAP_WINDOWS`] windows.
    fn smooth_average(&self, average: &AtomicU64, sample: u64) {
        let sample = sample.min(AVERAGE_CAP_WINDOWS * self.window_ns());
        let old = average.load(Ordering::Relaxed);
        average.store(old - old / 4 + sample / 4, Ordering::Relaxed);
    }

    /// A parked worker was running again `ns` after the notify that woke it.
    /// The estimate is a running median (each sample moves it a sixteenth
    /// up or down), not a mean: on a loaded machine some wake-ups wait
    /// milliseconds for a CPU (a gRPC server and its client on 2 cores:
    /// median 15 µs, 90th percentile 191 µs), and a mean pulled up by those
    /// had workers spinning longest exactly where the CPU was scarce.
    fn record_wake(&self, ns: u64) {
        let old = self.wake_ns.load(Ordering::Relaxed);
        let step = old / 16;
        let new = if ns > old { old + step } else { old - step };
        self.wake_ns.store(
            new.clamp(WAKE_LOWEST_NS, WAKE_HIGHEST_NS),
            Ordering::Relaxed,
        );
    }

    /// True while calls arrive less than the spin window apart on average:
    /// a worker that runs out of work then spins briefly before parking,
    /// because the next call is likely to come before a parked thread could
    /// even be woken. A paced load (a call every few milliseconds) is cold:
    /// nothing spins, and an idle pool costs no CPU.
    pub fn is_hot(&self) -> bool {
        self.gap_ns.load(Ordering::Relaxed) < self.window_ns()
    }

    /// True when calls are short on average (under `limit`): worth a waiter
    /// spinning for the result instead of parking.
    pub fn calls_are_short(&self, limit: Duration) -> bool {
        self.service_ns.load(Ordering::Relaxed) < limit.as_nanos() as u64
    }

    /// A call ran for `ns` nanoseconds.
    pub fn record_service(&self, ns: u64) {
        self.smooth_average(&self.service_ns, ns);
        if self.measured_ns.load(Ordering::Relaxed) == UNKNOWN {
            let first = ns.min(AVERAGE_CAP_WINDOWS * self.window_ns());
            self.measured_ns.store(first, Ordering::Relaxed);
        } else {
            self.smooth_average(&self.measured_ns, ns);
        }
    }

    /// True when calls are known to run longer than the spin window on
    /// average (a fresh pool's are not known): each queued call then
    /// needs a worker of its own, and a new worker is worth starting
    /// without waiting for it to run. Short calls are finished by the
    /// workers already running sooner than a new one could start.
    pub fn calls_are_long(&self) -> bool {
        let measured = self.measured_ns.load(Ordering::Relaxed);
        measured != UNKNOWN && measured >= self.window_ns()
    }

    /// The bounded queue's size (0: unbounded).
    pub fn max_queue(&self) -> usize {
        self.lock().max_queue
    }

    /// The calling thread has just let go of the GIL to wait for a result:
    /// a worker that found work may take the GIL now without sleeping for it.
    pub fn offer_gil(&self) {
        self.gil_offered.fetch_add(1, Ordering::AcqRel);
    }

    /// See `released`: the count of workers' returns for more work.
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, State<J>> {
        // A panic while holding this lock can only come from a bug in this
        // file; the state is still consistent enough to keep serving, and
        // refusing every later call would lose work.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a job. `tracked` jobs get position updates (see `Take::Job`).
    pub fn submit(&self, job: J, tracked: bool) -> Result<Submitted, Refused<J>> {
        self.submit_waking(job, tracked, true).map(|(s, _)| s)
    }

    /// `submit`; with `wake` false, a parked worker is woken only if no
    /// other worker will come back for work: none is running a call or on
    /// its way (notified, starting, woken or spinning). Otherwise the second value says a
    /// wake-up is owed, for the caller to hand out a little later with
    /// [`Pool::wake_owed`]: an event loop queues many calls in one pass and
    /// wakes the extra workers once, at the end of it, instead of once per
    /// call while it holds the GIL they need. No job depends on that later
    /// call: the busy worker takes the queued jobs one after another when
    /// its call returns. A worker thread to start is still asked for at once.
    pub fn submit_waking(
        &self,
        job: J,
        tracked: bool,
        wake: bool,
    ) -> Result<(Submitted, bool), Refused<J>> {
        let mut st = self.lock();
        if st.shutdown {
            return Err(Refused::Shutdown(job));
        }
        if st.is_full() {
            return Err(Refused::Full(job));
        }
        let now = self.now_ns();
        let gap = now.saturating_sub(st.last_submit_ns);
        st.last_submit_ns = now;
        self.smooth_average(&self.gap_ns, gap);
        let seq = st.next_seq;
        st.next_seq += 1;
        st.queue.push_back(Queued { seq, job });
        self.queued.store(st.queue.len(), Ordering::Release);
        let top_up = Self::top_up_waking(&mut st, wake);
        let spawn = top_up.spawn;
        let unclaimed = st.unclaimed;
        let index = st.queue.len() - 1;
        let in_flight = st.takers_in_flight();
        let waiting_at = (index >= in_flight).then(|| index - in_flight + 1);
        if tracked {
            if let Some(pos) = waiting_at {
                st.tracked.insert(seq, pos);
            }
        }
        drop(st);
        self.notify_workers(top_up.notify);
        Ok((
            Submitted {
                seq,
                spawn,
                unclaimed,
                waiting_at,
            },
            top_up.owed,
        ))
    }

    /// Hand out the wake-ups `submit_waking` left owed: wake parked workers
    /// (or ask for threads: the count returned) for queued jobs nobody is on
    /// the way for.
    ///
    /// When calls are short (under [`SPIN_FLOOR`], whatever the window: a
    /// call as long as a few wake-ups is worth a worker of its own), one
    /// parked worker at most: it runs the queued calls one after another
    /// faster than a second could even wake, and each worker awake takes
    /// turns at the GIL with the event loop that feeds them (an asyncio fan-out, 16 in flight on 8 workers: 19.9 ->
    /// 16.8 us per call). A woken worker that claims a job and still sees
    /// jobs nobody is on the way for wakes the next one (`claim_woken`), so
    /// a call that turns out long never keeps the others queued while
    /// workers sleep.
    pub fn wake_owed(&self) -> usize {
        let mut st = self.lock();
        let wakes = if self.calls_are_short(SPIN_FLOOR) {
            1
        } else {
            usize::MAX
        };
        let top_up = Self::top_up_at_most(&mut st, true, wakes);
        drop(st);
        self.notify_workers(top_up.notify);
        top_up.spawn
    }

    /// Take the next job without blocking (the fast path of a busy worker).
    pub fn try_take(&self) -> Take<J> {
        let mut st = self.lock();
        if st.workers > st.max_workers {
            // Shrunk by `resize`: this worker retires.
            return Self::retire(&mut st);
        }
        match self.pop(&mut st) {
            Some(take) => take,
            None => Self::going_idle(&mut st),
        }
    }

    fn going_idle(st: &mut State<J>) -> Take<J> {
        st.idle += 1;
        Take::Empty
    }

    /// Block until there is a job, or until the worker must exit.
    /// `idle_timeout` = None waits forever. Call without the GIL.
    pub fn wait_take(&self, idle_timeout: Option<Duration>) -> Take<J> {
        self.wait_take_inner(idle_timeout, false, false)
    }

    /// `wait_take` after a `Take::Empty`, which left the worker counted as
    /// idle. Work found is left in the queue for whichever worker holds the
    /// GIL first: `Take::Woken`, then `claim_woken` with the GIL.
    pub fn park_then_claim(&self, idle_timeout: Option<Duration>) -> Take<J> {
        self.wait_take_inner(idle_timeout, true, true)
    }

    /// After `Take::Woken`, with the GIL held: the next job, or `Empty` if
    /// a busy worker took it meanwhile (the worker parks again).
    pub fn claim_woken(&self) -> Take<J> {
        let mut st = self.lock();
        st.idle -= 1; // counted as on its way since `Take::Woken`
        if st.workers > st.max_workers {
            return Self::retire(&mut st);
        }
        if let Some(take) = self.pop(&mut st) {
            self.pass_wake_on(st);
            return take;
        }
        if st.shutdown {
            return Self::retire(&mut st);
        }
        Self::going_idle(&mut st)
    }

    /// A woken worker just took a job. It may have been woken for a burst
    /// that `wake_owed` woke only part of the workers for: if jobs nobody is
    /// on the way for are still queued, wake the next parked worker, so a
    /// call that turns out long never keeps the others queued while workers
    /// sleep.
    fn pass_wake_on(&self, mut st: MutexGuard<'_, State<J>>) {
        let pass_on = st.queue.len() > st.takers_in_flight() && st.parked > st.notified;
        if pass_on {
            st.notified += 1;
        }
        drop(st);
        if pass_on {
            self.notify_workers(1);
        }
    }

    fn wait_take_inner(
        &self,
        idle_timeout: Option<Duration>,
        counted_idle: bool,
        claim_later: bool,
    ) -> Take<J> {
        self.released.fetch_add(1, Ordering::AcqRel);
        let mut spin = if self.is_hot() {
            self.worker_spin.unwrap_or_else(|| self.spin_window())
        } else {
            Duration::ZERO
        };
        let mut st = self.lock();
        if counted_idle {
            // Counted as idle (and so as a taker) since `Take::Empty`; we
            // look at the queue next, before parking.
            st.idle -= 1;
        }
        // An idle timeout too large for the clock is no timeout at all.
        let deadline = idle_timeout.and_then(|t| Instant::now().checked_add(t));
        let mut woken = false;
        loop {
            if st.workers > st.max_workers {
                return Self::retire(&mut st);
            }
            if claim_later && !st.queue.is_empty() {
                st.idle += 1;
                return Take::Woken;
            }
            if let Some(take) = self.pop(&mut st) {
                if woken {
                    // Taken without `claim_woken` (a fresh worker's first
                    // wait): pass the wake-up on here instead.
                    self.pass_wake_on(st);
                }
                return take;
            }
            if st.shutdown {
                return Self::retire(&mut st);
            }
            // One spinner at a time: on a small machine more would take
            // the CPU from the very threads that submit and finish calls.
            if !spin.is_zero() && st.spinning == 0 && st.spin_record.worth_spinning() {
                // Counted as idle while spinning, so a submission wakes us
                // (its notify is harmlessly lost) instead of starting a thread.
                st.idle += 1;
                st.spinning += 1;
                drop(st);
                let offered = self.gil_offered.load(Ordering::Acquire);
                let found = spin_until(spin, || self.queued.load(Ordering::Acquire) > 0);
                if found && claim_later {
                    // The submitter still holds the GIL: let it go first.
                    spin_until(self.gil_handoff_wait, || {
                        self.gil_offered.load(Ordering::Acquire) != offered
                    });
                }
                spin = Duration::ZERO;
                st = self.lock();
                st.idle -= 1;
                st.spinning -= 1;
                st.spin_record.spun(found);
                continue;
            }
            st.idle += 1;
            st.parked += 1;
            let parked_at = self.now_ns();
            let timed_out = match deadline {
                None => {
                    st = self.work.wait(st).unwrap_or_else(|e| e.into_inner());
                    false
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        true
                    } else {
                        // In OS-sized pieces; a piece ending early is no timeout.
                        let (guard, result) = self
                            .work
                            .wait_timeout(st, crate::clamp::os_wait(deadline - now))
                            .unwrap_or_else(|e| e.into_inner());
                        st = guard;
                        result.timed_out() && Instant::now() >= deadline
                    }
                }
            };
            st.idle -= 1;
            st.parked -= 1;
            woken = true;
            // A sample only from a notify sent while we slept, one per
            // notify (taken from the slot), and only while a notify is owed:
            // `notify_all` (resize, shutdown), spurious and timed-out
            // wake-ups say nothing about how fast a notified thread runs.
            if !timed_out && st.notified > 0 {
                let notified_at = self.notified_ns.swap(0, Ordering::AcqRel);
                if notified_at > parked_at {
                    self.record_wake(self.now_ns().saturating_sub(notified_at));
                }
            }
            // Whether or not the notify was meant for us (a spurious or
            // timed-out wake-up may race with it), count one as consumed: an
            // under-count only costs a spare notify later, an over-count
            // would leave a job with nobody coming for it.
            st.notified = st.notified.saturating_sub(1).min(st.parked);
            if timed_out && st.queue.is_empty() {
                return Self::retire(&mut st);
            }
        }
    }

    /// A freshly started worker's first take: `submit` counted it as
    /// starting, and it may find its job already taken by a busy worker.
    pub fn first_take(&self, idle_timeout: Option<Duration>) -> Take<J> {
        {
            let mut st = self.lock();
            st.starting = st.starting.saturating_sub(1);
            if st.workers <= st.max_workers {
                if let Some(take) = self.pop(&mut st) {
                    return take;
                }
            }
        }
        self.wait_take(idle_timeout)
    }

    fn pop(&self, st: &mut State<J>) -> Option<Take<J>> {
        let Queued { seq, job } = st.queue.pop_front()?;
        self.queued.store(st.queue.len(), Ordering::Release);
        st.running += 1;
        let tracked = !st.tracked.is_empty() && st.tracked.remove(&seq).is_some();
        let updates = Self::position_updates(st);
        Some(Take::Job {
            seq,
            job,
            tracked,
            updates,
        })
    }

    fn retire(st: &mut State<J>) -> Take<J> {
        st.workers = st.workers.saturating_sub(1);
        Take::Exit
    }

    /// The new positions of tracked jobs after the queue moved (a job left
    /// it). Only the jobs standing on a notice position are looked at (see
    /// [`notice_positions`]): the job at position `p` sits at index
    /// `p - 1 + in_flight`, so this costs O(log n) lookups. Recomputing every
    /// tracked job instead told each of N waiting jobs of each start, N*N/2
    /// notices in all (2 million for 2000 calls behind one worker).
    fn position_updates(st: &mut State<J>) -> Vec<(u64, usize)> {
        if st.tracked.is_empty() {
            return Vec::new();
        }
        let in_flight = st.takers_in_flight();
        let queue = &st.queue;
        let mut updates = Vec::new();
        for pos in notice_positions() {
            let Some(queued) = queue.get(pos - 1 + in_flight) else {
                break;
            };
            if let Some(last) = st.tracked.get_mut(&queued.seq) {
                // Positions only go down: a job told 3 is never told 4.
                if pos < *last {
                    *last = pos;
                    updates.push((queued.seq, pos));
                }
            }
        }
        updates
    }

    /// A worker finished a job (`ok`: without an exception) and, still
    /// holding the GIL, asks for the next one without blocking: one lock
    /// round trip per job on the hot path.
    pub fn done_and_try_take(&self, ok: bool) -> Take<J> {
        let mut st = self.lock();
        st.running = st.running.saturating_sub(1);
        Self::count(&mut st, ok);
        let bounded = st.is_full_or_bounded();
        let take = if st.workers > st.max_workers {
            Self::retire(&mut st)
        } else {
            match self.pop(&mut st) {
                Some(take) => take,
                None => Self::going_idle(&mut st),
            }
        };
        drop(st);
        if bounded {
            // A submitter waiting for room; notified without the lock held,
            // so that it does not wake only to wait for the lock.
            self.room.notify_one();
        }
        take
    }

    /// A worker finished a job.
    #[cfg(test)]
    pub fn done(&self, ok: bool) {
        let mut st = self.lock();
        st.running = st.running.saturating_sub(1);
        Self::count(&mut st, ok);
        drop(st);
        self.room.notify_one();
    }

    /// An abandoned worker finished the job it was abandoned in; it was
    /// already taken off `running` and the ceiling.
    pub fn done_abandoned(&self, ok: bool) {
        let mut st = self.lock();
        Self::count(&mut st, ok);
    }

    fn count(st: &mut State<J>, ok: bool) {
        if ok {
            st.stats.completed += 1;
        } else {
            st.stats.failed += 1;
        }
    }

    /// A popped job turned out to be cancelled before it started.
    pub fn skipped_cancelled(&self) {
        let mut st = self.lock();
        st.running = st.running.saturating_sub(1);
        st.stats.cancelled += 1;
        drop(st);
        self.room.notify_one();
    }

    /// Remove a queued job (its future was cancelled). Returns the job and
    /// the position updates, or None if a worker already took it.
    pub fn remove(&self, seq: u64) -> Option<(J, Vec<(u64, usize)>)> {
        self.take_back(seq, true)
    }

    /// `remove` for a job whose submission is refused after all (no worker
    /// thread could start for it): it was never accepted, so it is not
    /// counted as cancelled.
    pub fn withdraw(&self, seq: u64) -> Option<(J, Vec<(u64, usize)>)> {
        self.take_back(seq, false)
    }

    fn take_back(&self, seq: u64, cancelled: bool) -> Option<(J, Vec<(u64, usize)>)> {
        let mut st = self.lock();
        let index = st.queue.binary_search_by_key(&seq, |q| q.seq).ok()?;
        let queued = st.queue.remove(index)?;
        self.queued.store(st.queue.len(), Ordering::Release);
        st.tracked.remove(&seq);
        if cancelled {
            st.stats.cancelled += 1;
        }
        let updates = Self::position_updates(&mut st);
        drop(st);
        self.room.notify_one();
        Some((queued.job, updates))
    }

    /// Take the oldest queued job out, by hand (the `_work_queue.get()` of
    /// code written for the standard library's pool): its seq, the job and
    /// the position updates of the tracked jobs behind it.
    pub fn pop_front(&self) -> Option<(u64, J, PositionUpdates)> {
        let mut st = self.lock();
        let Queued { seq, job } = st.queue.pop_front()?;
        self.queued.store(st.queue.len(), Ordering::Release);
        st.tracked.remove(&seq);
        let updates = Self::position_updates(&mut st);
        drop(st);
        self.room.notify_one();
        Some((seq, job, updates))
    }

    /// The worker running a job is given up on (its call timed out): it no
    /// longer counts against the ceiling, and a replacement is started if
    /// work is waiting. Returns how many worker threads the caller must start.
    pub fn abandon_worker(&self) -> usize {
        let mut st = self.lock();
        st.workers = st.workers.saturating_sub(1);
        st.running = st.running.saturating_sub(1);
        st.stats.abandoned += 1;
        let top_up = Self::top_up_waking(&mut st, true);
        drop(st);
        self.notify_workers(top_up.notify);
        let spawn = top_up.spawn;
        // A replacement may make room in a bounded queue.
        self.room.notify_all();
        spawn
    }

    /// Count the workers to start or wake for queued jobs nobody is on the
    /// way for (see [`TopUp`]). With `wake` false a parked worker is
    /// notified only while no worker is busy or on its way (see
    /// `submit_waking`); otherwise the wake-up is owed.
    fn top_up_waking(st: &mut State<J>, wake: bool) -> TopUp {
        Self::top_up_at_most(st, wake, usize::MAX)
    }

    /// `top_up_waking`, notifying at most `wakes` parked workers.
    fn top_up_at_most(st: &mut State<J>, wake: bool, wakes: usize) -> TopUp {
        let mut top_up = TopUp::default();
        while st.queue.len() > st.takers_in_flight() {
            if st.parked > st.notified {
                if top_up.notify == wakes {
                    break;
                }
                if !wake && (st.running > 0 || st.takers_in_flight() > 0) {
                    top_up.owed = true;
                    break;
                }
                st.notified += 1;
                top_up.notify += 1;
            } else if st.workers < st.max_workers {
                st.workers += 1;
                st.starting += 1;
                st.unclaimed += 1;
                top_up.spawn += 1;
            } else {
                break;
            }
        }
        top_up
    }

    /// Wake `count` parked workers. Called after the lock is released: a
    /// worker notified while we hold it would wake only to wait for it.
    fn notify_workers(&self, count: usize) {
        if count > 0 {
            self.notified_ns.store(self.now_ns(), Ordering::Release);
        }
        for _ in 0..count {
            self.work.notify_one();
        }
    }

    /// Change the ceiling. Returns how many worker threads the caller must
    /// start (growing starts waiting work at once); shrinking lets running
    /// work finish and retires workers as they come back for more.
    pub fn resize(&self, max_workers: usize) -> usize {
        let mut st = self.lock();
        st.max_workers = max_workers;
        Self::drop_surplus_starts(&mut st);
        let top_up = Self::top_up_waking(&mut st, true);
        let shrunk = st.workers > st.max_workers;
        drop(st);
        if shrunk {
            self.work.notify_all();
        } else {
            self.notify_workers(top_up.notify);
        }
        let spawn = top_up.spawn;
        // Growing may make room in a bounded queue.
        self.room.notify_all();
        spawn
    }

    /// Stop accepting work. Queued jobs still run unless drained; idle
    /// workers exit once the queue is empty; blocked submitters are woken.
    pub fn shutdown(&self) {
        let mut st = self.lock();
        st.shutdown = true;
        drop(st);
        self.work.notify_all();
        self.room.notify_all();
    }

    /// Take every queued job out (for `cancel_futures` or a broken pool).
    pub fn drain(&self) -> Vec<J> {
        let mut st = self.lock();
        st.tracked.clear();
        let jobs: Vec<J> = st.queue.drain(..).map(|q| q.job).collect();
        self.queued.store(0, Ordering::Release);
        st.stats.cancelled += jobs.len() as u64;
        drop(st);
        self.room.notify_all();
        jobs
    }

    /// Take out the queued jobs that wait for a running call to finish,
    /// for `shutdown(cancel_futures=True)`. Jobs a worker is already on its
    /// way to (a notified idle worker, a thread being started for it) stay:
    /// they never had a queue position, so to the caller they have started,
    /// as in the stdlib, whose fresh worker takes such a call before
    /// `shutdown` can drain it (CPython's test_cancel_futures_wait_false).
    pub fn drain_waiting(&self) -> Vec<J> {
        let mut st = self.lock();
        let keep = st.takers_in_flight().min(st.queue.len());
        let jobs: Vec<Queued<J>> = st.queue.drain(keep..).collect();
        if let Some(first) = jobs.first() {
            // Queued seqs ascend: the drained ones are all from `first` on.
            st.tracked.split_off(&first.seq);
        }
        // The hint idle workers spin on: left as it was, one would spin a
        // whole window for calls no longer there.
        self.queued.store(st.queue.len(), Ordering::Release);
        st.stats.cancelled += jobs.len() as u64;
        drop(st);
        self.room.notify_all();
        jobs.into_iter().map(|q| q.job).collect()
    }

    /// `drain` for a forked child: never blocks, since the lock may be held
    /// by a thread that does not exist in the child. None if it is held.
    pub fn try_drain(&self) -> Option<Vec<J>> {
        let mut st = match self.state.try_lock() {
            Ok(st) => st,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        st.tracked.clear();
        self.queued.store(0, Ordering::Release);
        Some(st.queue.drain(..).map(|q| q.job).collect())
    }

    /// Wait up to `timeout` for room in a bounded queue. True if there may
    /// be room now (or the pool shut down: the caller's next submit says
    /// which). Call without the GIL; callers loop in slices to see signals.
    pub fn wait_for_room(&self, timeout: Duration) -> bool {
        let st = self.lock();
        let full = |st: &mut State<J>| !st.shutdown && st.is_full();
        let (_st, result) = self
            .room
            .wait_timeout_while(st, timeout, full)
            .unwrap_or_else(|e| e.into_inner());
        !result.timed_out()
    }

    /// Claim one of the worker starts the pool asked for: true if one was
    /// owed, and the caller must now start its thread (or, if it never
    /// does, give the place back: `worker_gone`). One at a time, so two
    /// callers never start a thread for one place.
    pub fn claim_start(&self) -> bool {
        let mut st = self.lock();
        Self::drop_surplus_starts(&mut st);
        if st.unclaimed == 0 {
            return false;
        }
        st.unclaimed -= 1;
        true
    }

    /// Starts still unclaimed when the ceiling came down (`resize`) are
    /// not made: a thread started for one would only retire.
    fn drop_surplus_starts(st: &mut State<J>) {
        let surplus = st.unclaimed.min(st.workers.saturating_sub(st.max_workers));
        st.unclaimed -= surplus;
        st.workers -= surplus;
        st.starting = st.starting.saturating_sub(surplus);
    }

    /// Worker starts owed and not claimed (see `claim_start`).
    pub fn unclaimed(&self) -> usize {
        self.lock().unclaimed
    }

    /// A claimed worker start that never reached the loop (its thread was
    /// never made, or its initializer failed) gives back its place: the
    /// calls it was for are topped up for by the next submission.
    pub fn worker_gone(&self) {
        let mut st = self.lock();
        st.workers = st.workers.saturating_sub(1);
        st.starting = st.starting.saturating_sub(1);
    }

    /// A claimed worker start whose thread could not be made (`Thread.start`
    /// raised, as it does when the process can start no more threads). Its
    /// place goes back, as in `worker_gone`, and so do the starts still
    /// unclaimed: each would fail the same way, and while owed they count as
    /// workers (`stats`, and against the ceiling) and as takers on their way
    /// (`takers_in_flight`), so idle workers would leave queued the calls they
    /// were meant for. Parked workers are woken for the queued calls nobody is
    /// on the way for now; the rest are taken by busy workers as they finish,
    /// and the next submission asks for a start again if still needed.
    pub fn start_failed(&self) {
        let mut st = self.lock();
        let dropped = 1 + st.unclaimed;
        st.unclaimed = 0;
        st.workers = st.workers.saturating_sub(dropped);
        st.starting = st.starting.saturating_sub(dropped);
        let mut notify = 0;
        while st.queue.len() > st.takers_in_flight() && st.parked > st.notified {
            st.notified += 1;
            notify += 1;
        }
        drop(st);
        self.notify_workers(notify);
    }

    /// Whether a submission now would be refused as full (and the pool is
    /// not shut down): async submitters wait for room while this holds.
    pub fn is_full(&self) -> bool {
        let st = self.lock();
        !st.shutdown && st.is_full()
    }

    /// The current position of a queued tracked job (None once taken).
    pub fn position(&self, seq: u64) -> Option<usize> {
        let st = self.lock();
        let index = st.queue.binary_search_by_key(&seq, |q| q.seq).ok()?;
        Some((index + 1).saturating_sub(st.takers_in_flight()).max(1))
    }

    pub fn stats(&self) -> Stats {
        let st = self.lock();
        Stats {
            max_workers: st.max_workers,
            workers: st.workers,
            idle: st.idle,
            running: st.running,
            queued: st.queue.len(),
            ..st.stats
        }
    }
}

impl<J> State<J> {
    /// Workers already on their way to take a queued job: notified parked
    /// ones, freshly started ones, and idle ones not parked (spinning or
    /// about to park), which look at the queue before they park. Jobs at
    /// queue indices below this number start without waiting for a running
    /// call to finish.
    fn takers_in_flight(&self) -> usize {
        self.notified + self.starting + (self.idle - self.parked)
    }

    /// The bounded queue counts the calls that must wait for a running call
    /// to finish, not those a worker is already on its way to take.
    fn is_full_or_bounded(&self) -> bool {
        self.max_queue > 0
    }

    fn is_full(&self) -> bool {
        self.max_queue > 0 && self.queue.len() >= self.max_queue + self.takers_in_flight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    /// The caller claims the worker starts it was asked for (its threads
    /// then count as started: a shrink retires them, not the starts).
    fn claim_every_start<J>(pool: &Pool<J>) {
        while pool.claim_start() {}
    }

    fn job(t: Take<u32>) -> Option<u32> {
        match t {
            Take::Job { job, .. } => Some(job),
            _ => None,
        }
    }

    #[test]
    fn first_submissions_ask_for_workers_up_to_the_ceiling() {
        let pool = Pool::new(2, 0);
        let a = pool.submit(1, false).unwrap();
        let b = pool.submit(2, false).unwrap();
        let c = pool.submit(3, true).unwrap();
        assert_eq!((a.spawn, b.spawn, c.spawn), (1, 1, 0));
        assert_eq!(a.waiting_at, None);
        assert_eq!(b.waiting_at, None);
        assert_eq!(c.waiting_at, Some(1));
        assert_eq!(pool.stats().workers, 2);
    }

    #[test]
    fn jobs_come_out_in_fifo_order() {
        let pool = Pool::new(1, 0);
        for i in 0..5 {
            pool.submit(i, false).unwrap();
        }
        let mut seen = vec![job(pool.first_take(None)).unwrap()];
        for _ in 0..4 {
            seen.push(job(pool.try_take()).unwrap());
        }
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        assert_eq!(pool.try_take(), Take::Empty);
    }

    #[test]
    fn positions_shrink_as_the_queue_moves() {
        let pool = Pool::new(1, 0);
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        let s1 = pool.submit(1, true).unwrap();
        let s2 = pool.submit(2, true).unwrap();
        assert_eq!(s1.waiting_at, Some(1));
        assert_eq!(s2.waiting_at, Some(2));
        pool.done(true);
        match pool.try_take() {
            Take::Job {
                job,
                tracked,
                updates,
                ..
            } => {
                assert_eq!(job, 1);
                assert!(tracked);
                assert_eq!(updates, vec![(s2.seq, 1)]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn removing_a_queued_job_updates_those_behind_it() {
        let pool = Pool::new(1, 0);
        pool.submit(0, false).unwrap();
        let a = pool.submit(1, true).unwrap();
        let b = pool.submit(2, true).unwrap();
        assert_eq!(b.waiting_at, Some(2));
        let (removed, updates) = pool.remove(a.seq).unwrap();
        assert_eq!(removed, 1);
        assert_eq!(updates, vec![(b.seq, 1)]);
        assert!(pool.remove(a.seq).is_none());
        assert_eq!(pool.stats().cancelled, 1);
    }

    #[test]
    fn bounded_queue_refuses_when_full_and_frees_on_take() {
        let pool = Pool::new(1, 1);
        pool.submit(0, false).unwrap(); // taken by the worker being started
        pool.submit(1, false).unwrap(); // fills the queue
        assert_eq!(pool.submit(2, false), Err(Refused::Full(2)));
        assert!(job(pool.first_take(None)).is_some());
        // The worker runs job 0; job 1 still waits for it, so still full.
        assert_eq!(pool.submit(2, false), Err(Refused::Full(2)));
        assert!(job(pool.done_and_try_take(true)).is_some());
        assert!(pool.submit(2, false).is_ok());
    }

    #[test]
    fn shutdown_refuses_and_wakes_idle_workers() {
        let pool = Arc::new(Pool::<u32>::new(1, 0));
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        pool.done(true);
        let p = Arc::clone(&pool);
        let worker = thread::spawn(move || p.wait_take(None));
        while pool.stats().idle == 0 {
            thread::yield_now();
        }
        pool.shutdown();
        assert_eq!(worker.join().unwrap(), Take::Exit);
        assert_eq!(pool.submit(9, false), Err(Refused::Shutdown(9)));
    }

    #[test]
    fn idle_workers_retire_after_the_idle_timeout() {
        let pool = Pool::<u32>::new(1, 0);
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        pool.done(true);
        assert_eq!(pool.wait_take(Some(Duration::from_millis(1))), Take::Exit);
        assert_eq!(pool.stats().workers, 0);
        assert_eq!(pool.submit(1, false).unwrap().spawn, 1);
    }

    #[test]
    fn resize_grows_for_waiting_work_and_shrinks_lazily() {
        let pool = Pool::new(1, 0);
        for i in 0..4 {
            pool.submit(i, false).unwrap();
        }
        assert_eq!(pool.resize(3), 2);
        assert_eq!(pool.stats().workers, 3);
        claim_every_start(&pool);
        pool.resize(1);
        assert_eq!(pool.try_take(), Take::Exit);
        assert_eq!(pool.try_take(), Take::Exit);
        assert!(job(pool.try_take()).is_some());
    }

    #[test]
    fn a_worker_out_of_work_is_idle_before_it_parks() {
        let pool = Pool::new(4, 0);
        assert_eq!(pool.submit(0, false).unwrap().spawn, 1);
        assert!(job(pool.first_take(None)).is_some());
        // The worker finished (still holding the GIL) and found nothing:
        // a new submission must reuse it, not start a second thread.
        assert_eq!(pool.done_and_try_take(true), Take::Empty);
        assert_eq!(pool.stats().idle, 1);
        let s = pool.submit(1, false).unwrap();
        assert_eq!(s.spawn, 0);
        assert_eq!(s.waiting_at, None);
        assert_eq!(pool.park_then_claim(None), Take::Woken);
        assert_eq!(job(pool.claim_woken()), Some(1));
        let st = pool.stats();
        assert_eq!((st.idle, st.workers, st.running), (0, 1, 1));
        // The notice meant for the parked-to-be worker was consumed: a stale
        // one would count as a worker on its way, and nothing would start.
        assert_eq!(pool.submit(2, false).unwrap().spawn, 1);
    }

    #[test]
    fn drain_waiting_keeps_jobs_a_worker_is_on_its_way_to() {
        let pool = Pool::new(2, 0);
        for i in 0..5 {
            pool.submit(i, i >= 3).unwrap();
        }
        // Two threads are being started for jobs 0 and 1; 2..5 wait.
        assert_eq!(pool.drain_waiting(), vec![2, 3, 4]);
        assert_eq!(pool.stats().queued, 2);
        // The hint idle workers spin on follows the queue.
        assert_eq!(pool.queued.load(Ordering::Acquire), 2);
        assert_eq!(pool.stats().cancelled, 3);
        assert_eq!(job(pool.first_take(None)), Some(0));
        assert_eq!(job(pool.first_take(None)), Some(1));
        // With both workers busy nothing is on its way: all of it drains.
        pool.submit(5, true).unwrap();
        assert_eq!(pool.drain_waiting(), vec![5]);
        assert_eq!(pool.position(6), None);
        assert_eq!(pool.queued.load(Ordering::Acquire), 0);
    }

    #[test]
    fn try_drain_empties_the_queue_and_its_hint() {
        let pool = Pool::new(1, 0);
        for i in 0..3 {
            pool.submit(i, false).unwrap();
        }
        assert_eq!(pool.try_drain(), Some(vec![0, 1, 2]));
        assert_eq!(pool.queued.load(Ordering::Acquire), 0);
    }

    #[test]
    fn abandoning_a_worker_starts_a_replacement_for_waiting_work() {
        let pool = Pool::new(1, 0);
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        pool.submit(1, false).unwrap();
        assert_eq!(pool.abandon_worker(), 1);
        assert_eq!(pool.stats().abandoned, 1);
    }

    #[test]
    fn pop_front_takes_the_oldest_job_by_hand() {
        let pool = Pool::new(1, 0);
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        let a = pool.submit(1, false).unwrap();
        let b = pool.submit(2, true).unwrap();
        assert_eq!(b.waiting_at, Some(2));
        let (seq, taken, updates) = pool.pop_front().unwrap();
        assert_eq!((seq, taken), (a.seq, 1));
        assert_eq!(updates, vec![(b.seq, 1)]);
        assert_eq!(pool.stats().queued, 1);
        assert_eq!(pool.pop_front().map(|(_, j, _)| j), Some(2));
        assert!(pool.pop_front().is_none());
    }

    #[test]
    fn calls_count_as_long_from_the_first_measured_one() {
        let pool: Pool<u32> = Pool::new(1, 0);
        let window = pool.window_ns();
        assert!(!pool.calls_are_long(), "a fresh pool's calls are not known");
        // One short call is enough to say so (service_ns, starting from
        // the cap, would still say long).
        pool.record_service(1_000);
        assert!(!pool.calls_are_long());
        assert!(!pool.calls_are_short(pool.spin_window()));
        for _ in 0..3 {
            pool.record_service(100 * window);
        }
        assert!(pool.calls_are_long());
        for _ in 0..20 {
            pool.record_service(1_000);
        }
        assert!(!pool.calls_are_long());
        // The first call long: long at once.
        let pool: Pool<u32> = Pool::new(1, 0);
        pool.record_service(2 * window);
        assert!(pool.calls_are_long());
    }

    #[test]
    fn a_pool_is_cold_until_calls_come_close_together() {
        let pool = Pool::new(1, 0);
        assert!(!pool.is_hot());
        for i in 0..200 {
            pool.submit(i, false).unwrap();
        }
        assert!(pool.is_hot());
        // Paced calls (here 60 ms apart, far above the spin window) cool it.
        for _ in 0..40 {
            pool.smooth_average(&pool.gap_ns, 60_000_000);
        }
        assert!(!pool.is_hot());
    }

    #[test]
    fn a_cold_pool_parks_its_workers_without_spinning() {
        // A cold pool: the worker goes straight to the condvar, so the wait
        // ends by timeout with no job, not by a spin that saw one.
        let pool = Pool::<u32>::new(1, 0);
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        pool.done(true);
        assert!(!pool.is_hot());
        assert_eq!(pool.wait_take(Some(Duration::from_millis(1))), Take::Exit);
    }

    #[test]
    fn one_long_pause_cools_a_hot_pool_and_a_few_close_calls_heat_it() {
        let pool = Pool::<u32>::new(1, 0);
        assert!(!pool.is_hot(), "a fresh pool is cold");
        let gap = |ns: u64| pool.smooth_average(&pool.gap_ns, ns);
        for _ in 0..5 {
            gap(2_000);
        }
        assert!(pool.is_hot());
        gap(3_600_000_000_000); // an idle hour
        assert!(!pool.is_hot());
        for _ in 0..5 {
            gap(2_000);
        }
        assert!(pool.is_hot(), "the idle hour is forgotten after five calls");
        // The same for run times.
        let window = pool.spin_window();
        for _ in 0..5 {
            pool.record_service(2_000);
        }
        assert!(pool.calls_are_short(window));
        pool.record_service(3_600_000_000_000);
        assert!(!pool.calls_are_short(window));
    }

    /// Waits (10 s at most, against microseconds) for `count` of `workers` to
    /// return, and takes them out of the list.
    fn returned(workers: &mut Vec<thread::JoinHandle<Take<u32>>>, count: usize) -> Vec<Take<u32>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while workers.iter().filter(|w| w.is_finished()).count() < count {
            assert!(Instant::now() < deadline, "a worker was never woken");
            thread::yield_now();
        }
        let (done, parked): (Vec<_>, Vec<_>) = workers.drain(..).partition(|w| w.is_finished());
        *workers = parked;
        done.into_iter().map(|w| w.join().unwrap()).collect()
    }

    #[test]
    fn an_owed_wake_for_short_calls_wakes_one_worker_who_passes_it_on() {
        let mut pool = Pool::new(3, 0);
        pool.worker_spin = Some(Duration::ZERO);
        let pool = Arc::new(pool);
        for i in 0..3 {
            assert_eq!(pool.submit(i, false).unwrap().spawn, 1);
        }
        for _ in 0..3 {
            assert!(job(pool.first_take(None)).is_some());
        }
        for _ in 0..3 {
            pool.done(true);
            assert_eq!(pool.try_take(), Take::Empty);
        }
        let mut workers: Vec<_> = (0..3)
            .map(|_| park_worker(&pool, |p| p.park_then_claim(None)))
            .collect();
        for _ in 0..8 {
            pool.record_service(1_000);
        }
        // An event loop queues three short calls in one pass: the first
        // wakes a worker, the other two owe theirs, and the end of the pass
        // hands out one of those.
        for i in 10..13 {
            pool.submit_waking(i, false, false).unwrap();
        }
        assert_eq!(pool.wake_owed(), 0);
        {
            // Notified, or woken since (a waking worker leaves both counts).
            let st = pool.lock();
            assert_eq!(
                st.notified + (3 - st.parked),
                2,
                "woke more than one owed worker"
            );
        }
        assert_eq!(returned(&mut workers, 2), [Take::Woken, Take::Woken]);
        // The first to claim a job sees one nobody is on the way for: it
        // wakes the last worker, so no call waits while a worker sleeps.
        assert_eq!(job(pool.claim_woken()), Some(10));
        assert_eq!(job(pool.claim_woken()), Some(11));
        assert_eq!(returned(&mut workers, 1), [Take::Woken]);
        assert_eq!(job(pool.claim_woken()), Some(12));
    }

    #[test]
    fn the_spin_window_is_three_measured_wake_ups_within_its_bounds() {
        let pool = Pool::<u32>::new(1, 0);
        assert_eq!(pool.spin_window(), SPIN_FLOOR, "unmeasured: the floor");
        for _ in 0..100 {
            pool.record_wake(58_000);
        }
        let window = pool.spin_window().as_micros();
        assert!((160..=185).contains(&window), "{window} µs");
        for _ in 0..100 {
            pool.record_wake(3_600_000_000_000);
        }
        assert_eq!(pool.spin_window(), SPIN_CEILING);
        for _ in 0..100 {
            pool.record_wake(2_000);
        }
        assert_eq!(pool.spin_window(), SPIN_FLOOR);
    }

    #[test]
    fn wake_ups_that_waited_for_a_cpu_do_not_widen_the_window() {
        // Three fast wake-ups in five, two that waited milliseconds for a
        // CPU: the window follows the typical one (a mean would be 400 µs).
        let pool = Pool::<u32>::new(1, 0);
        for _ in 0..100 {
            for ns in [15_000, 1_000_000, 15_000, 1_000_000, 15_000] {
                pool.record_wake(ns);
            }
        }
        assert_eq!(pool.spin_window(), SPIN_FLOOR);
    }

    #[test]
    fn slow_wake_ups_make_a_pool_hot_at_wider_gaps() {
        // Calls 120 µs apart, each paying two 58 µs wake-ups when the pool
        // is cold: a floor-sized window would keep them cold for good.
        let pool = Pool::<u32>::new(1, 0);
        for _ in 0..40 {
            pool.smooth_average(&pool.gap_ns, 120_000);
        }
        assert!(!pool.is_hot());
        for _ in 0..100 {
            pool.record_wake(58_000);
        }
        assert!(pool.is_hot());
    }

    #[test]
    fn a_notified_worker_measures_its_wake_up_and_a_timed_out_one_does_not() {
        let mut pool = Pool::<u32>::new(1, 0);
        pool.worker_spin = Some(Duration::ZERO);
        let pool = Arc::new(pool);
        pool.wake_ns.store(0, Ordering::Relaxed);
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        pool.done(true);
        // A notify stamp that looks sent during the wait: still no sample.
        pool.notified_ns.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(pool.wait_take(Some(Duration::from_millis(1))), Take::Exit);
        assert_eq!(
            pool.wake_ns.load(Ordering::Relaxed),
            0,
            "no notify, no sample"
        );
        let worker = parked_worker(&pool);
        pool.submit(7, false).unwrap();
        assert_eq!(job(worker.join().unwrap()), Some(7));
        assert!(
            pool.wake_ns.load(Ordering::Relaxed) > 0,
            "the wake-up went unmeasured"
        );
    }

    #[test]
    fn service_times_are_smoothed() {
        let pool = Pool::<u32>::new(1, 0);
        assert!(!pool.calls_are_short(Duration::from_micros(50)));
        for _ in 0..200 {
            pool.record_service(1_000);
        }
        assert!(pool.calls_are_short(Duration::from_micros(50)));
        for _ in 0..200 {
            pool.record_service(10_000_000);
        }
        assert!(!pool.calls_are_short(Duration::from_micros(50)));
    }

    #[test]
    fn many_threads_every_job_taken_exactly_once() {
        let pool = Arc::new(Pool::new(4, 0));
        let total = 20_000u32;
        let mut spawned = 0;
        for i in 0..total {
            if pool.submit(i, false).unwrap().spawn == 1 {
                spawned += 1;
            }
        }
        assert_eq!(spawned, 4);
        let handles: Vec<_> = (0..spawned)
            .map(|_| {
                let p = Arc::clone(&pool);
                thread::spawn(move || {
                    let mut got = Vec::new();
                    let mut take = p.first_take(Some(Duration::from_millis(20)));
                    loop {
                        match take {
                            Take::Job { job, .. } => {
                                got.push(job);
                                p.done(true);
                            }
                            Take::Exit => return got,
                            Take::Empty => {}
                            Take::Woken => {
                                take = p.claim_woken();
                                continue;
                            }
                        }
                        take = match p.try_take() {
                            Take::Empty => p.park_then_claim(Some(Duration::from_millis(20))),
                            t => t,
                        };
                    }
                })
            })
            .collect();
        let mut all: Vec<u32> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..total).collect::<Vec<_>>());
        assert_eq!(pool.stats().completed, u64::from(total));
        assert_eq!(pool.stats().workers, 0);
    }

    #[test]
    fn work_found_by_a_parked_worker_stays_queued_for_whoever_claims_first() {
        let pool = Arc::new(Pool::new(2, 0));
        assert_eq!(pool.submit(1u32, false).unwrap().spawn, 1);
        assert_eq!(pool.submit(2u32, false).unwrap().spawn, 1);
        // Both workers run a job; one finishes and parks.
        assert_eq!(job(pool.first_take(None)), Some(1));
        assert_eq!(job(pool.first_take(None)), Some(2));
        pool.done(true);
        assert_eq!(pool.try_take(), Take::Empty);
        let p = Arc::clone(&pool);
        let parked = thread::spawn(move || p.park_then_claim(None));
        while pool.stats().idle == 0 || pool.lock().parked == 0 {
            thread::yield_now();
        }
        // A new job wakes it; it leaves the job queued and stays counted as
        // on its way, so the job neither starts a thread nor wakes another.
        assert_eq!(pool.submit(3u32, false).unwrap().spawn, 0);
        assert_eq!(parked.join().unwrap(), Take::Woken);
        assert_eq!(pool.stats().queued, 1);
        // The busy worker, holding the GIL first, takes it.
        pool.done(true);
        assert_eq!(job(pool.try_take()), Some(3));
        // The woken one finds nothing and is idle again, ready to park.
        assert_eq!(pool.claim_woken(), Take::Empty);
        let stats = pool.stats();
        assert_eq!((stats.idle, stats.running, stats.queued), (1, 1, 0));
        // Next time it is first: it claims the job.
        assert_eq!(pool.submit(4u32, false).unwrap().spawn, 0);
        assert_eq!(pool.park_then_claim(None), Take::Woken);
        assert_eq!(job(pool.claim_woken()), Some(4));
        assert_eq!(pool.stats().idle, 0);
    }

    #[test]
    fn a_wake_up_with_nothing_queued_does_not_retire_a_worker() {
        let pool = Arc::new(Pool::new(1, 0));
        assert_eq!(pool.submit(1u32, false).unwrap().spawn, 1);
        assert_eq!(job(pool.first_take(None)), Some(1));
        pool.done(true);
        assert_eq!(pool.try_take(), Take::Empty);
        let p = Arc::clone(&pool);
        let worker = thread::spawn(move || p.park_then_claim(Some(Duration::from_secs(600))));
        while pool.lock().parked == 0 {
            thread::yield_now();
        }
        // Wake-ups meant for nobody (like spurious ones, or a job a busy
        // worker took first): it finds nothing, has not timed out, parks again.
        for _ in 0..100 {
            pool.work.notify_all();
            thread::sleep(Duration::from_millis(1));
        }
        assert!(
            !worker.is_finished(),
            "the worker retired without timing out"
        );
        assert_eq!(pool.stats().workers, 1);
        pool.shutdown();
        assert_eq!(worker.join().unwrap(), Take::Exit);
    }

    #[test]
    fn spinning_stops_where_it_does_not_pay_and_is_tried_again_later() {
        let mut record = SpinRecord::default();
        // A spin-friendly load (a submit().result() loop): always spins.
        for _ in 0..100 {
            assert!(record.worth_spinning());
            record.spun(true);
        }
        // A bursty load whose spins find nothing: at most one spin in five.
        let mut spins = 0;
        for _ in 0..1000 {
            if record.worth_spinning() {
                spins += 1;
                record.spun(false);
            }
        }
        assert!((190..=205).contains(&spins), "{spins} spins of 1000 parks");
        // Nine spins in ten finding work keep it spinning.
        let mut skipped = 0;
        for i in 0..1000 {
            if record.worth_spinning() {
                record.spun(i % 10 != 0);
            } else {
                skipped += 1;
            }
        }
        assert!(skipped < 50, "skipped {skipped}");
    }

    /// A hot pool of one worker that ran 200 jobs and is now idle, with the
    /// worker's spin and its wait for the GIL stretched to `handoff`.
    fn hot_idle_pool(handoff: Duration) -> Arc<Pool<u32>> {
        let mut pool = Pool::new(1, 0);
        pool.worker_spin = Some(Duration::from_secs(600));
        pool.gil_handoff_wait = handoff;
        for i in 0..200 {
            pool.submit(i, false).unwrap();
        }
        assert!(pool.is_hot());
        assert_eq!(job(pool.first_take(None)), Some(0));
        for i in 1..200 {
            assert_eq!(job(pool.done_and_try_take(true)), Some(i));
        }
        assert_eq!(pool.done_and_try_take(true), Take::Empty);
        Arc::new(pool)
    }

    fn spinning_worker(pool: &Arc<Pool<u32>>) -> thread::JoinHandle<Take<u32>> {
        let p = Arc::clone(pool);
        let worker = thread::spawn(move || p.park_then_claim(None));
        while pool.lock().spinning == 0 {
            thread::yield_now();
        }
        worker
    }

    #[test]
    fn a_spinning_worker_that_finds_work_lets_the_submitter_offer_the_gil() {
        let pool = hot_idle_pool(Duration::from_secs(600));
        let worker = spinning_worker(&pool);
        pool.submit(7, false).unwrap();
        // It saw the job, but the submitter has not let go of the GIL yet.
        thread::sleep(Duration::from_millis(30));
        assert!(!worker.is_finished(), "took the GIL before it was offered");
        pool.offer_gil();
        assert_eq!(worker.join().unwrap(), Take::Woken);
        assert_eq!(job(pool.claim_woken()), Some(7));
    }

    #[test]
    fn without_an_offer_the_worker_asks_for_the_gil_after_the_wait() {
        // A submitter that never waits for a result (an event loop) offers
        // nothing: the worker goes on once the short wait is over.
        let pool = hot_idle_pool(Duration::from_millis(1));
        let worker = spinning_worker(&pool);
        pool.submit(7, false).unwrap();
        assert_eq!(worker.join().unwrap(), Take::Woken);
        assert_eq!(job(pool.claim_woken()), Some(7));
    }

    #[test]
    fn spin_until_spins_until_done_or_the_limit() {
        // Done only after many turns: the spin must not give up after the
        // first clock check (every 32 turns) while the limit is far.
        let mut turns = 0;
        assert!(spin_until(Duration::from_secs(30), || {
            turns += 1;
            turns >= 1_000
        }));
        assert_eq!(turns, 1_000);
        assert!(!spin_until(Duration::from_millis(1), || false));
    }

    #[test]
    fn released_counts_each_return_for_work_and_max_queue_reads_back() {
        let pool = Pool::new(1, 3);
        assert_eq!(pool.max_queue(), 3);
        assert_eq!(Pool::<u32>::new(1, 0).max_queue(), 0);
        pool.submit(1, false).unwrap();
        pool.submit(2, false).unwrap();
        assert_eq!(pool.released(), 0);
        assert_eq!(job(pool.wait_take(None)), Some(1));
        assert_eq!(pool.released(), 1);
        assert_eq!(job(pool.wait_take(None)), Some(2));
        assert_eq!(pool.released(), 2);
    }

    #[test]
    fn far_back_jobs_hear_round_positions_near_the_front_every_one() {
        let pool = Pool::new(1, 0);
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        let n = 2000;
        let seqs: Vec<u64> = (0..n)
            .map(|i| pool.submit(i + 1, true).unwrap().seq)
            .collect();
        let last = *seqs.last().unwrap();
        let (mut heard, mut total) = (Vec::new(), 0);
        for _ in 0..n {
            match pool.done_and_try_take(true) {
                Take::Job { updates, .. } => {
                    total += updates.len();
                    heard.extend(updates.iter().filter(|u| u.0 == last).map(|u| u.1));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        // Every waiting job told of every start was n*n/2 updates.
        assert!(total < 20 * n as usize, "{total}");
        assert_eq!(
            heard,
            [1000, 500, 200, 100, 50, 20, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1]
        );
    }

    #[test]
    fn every_tracked_job_behind_a_removed_one_moves_up() {
        let pool = Pool::new(1, 0);
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        let a = pool.submit(1, true).unwrap();
        let b = pool.submit(2, true).unwrap();
        let c = pool.submit(3, true).unwrap();
        assert_eq!(
            [a.waiting_at, b.waiting_at, c.waiting_at],
            [Some(1), Some(2), Some(3)]
        );
        let (_, updates) = pool.remove(a.seq).unwrap();
        assert_eq!(updates, vec![(b.seq, 1), (c.seq, 2)]);
        assert_eq!(pool.position(c.seq), Some(2));
    }

    #[test]
    fn outcomes_are_counted_where_they_happen() {
        let pool = Pool::new(2, 0);
        for i in 0..4 {
            pool.submit(i, false).unwrap();
        }
        assert_eq!(job(pool.first_take(None)), Some(0));
        assert_eq!(job(pool.first_take(None)), Some(1));
        // Job 0 raised; its worker takes job 2 at once.
        assert_eq!(job(pool.done_and_try_take(false)), Some(2));
        // Job 2's future was cancelled before it could start.
        pool.skipped_cancelled();
        // The worker on job 1 is abandoned (job 3 waits: a replacement
        // starts), and its call returns normally later.
        assert_eq!(pool.abandon_worker(), 1);
        pool.done_abandoned(true);
        let s = pool.stats();
        assert_eq!(
            (s.completed, s.failed, s.cancelled, s.abandoned),
            (1, 1, 1, 1)
        );
        assert_eq!((s.running, s.queued, s.workers), (0, 1, 2));
        pool.done_abandoned(false);
        assert_eq!(pool.stats().failed, 2);
    }

    #[test]
    fn a_parked_worker_waits_out_its_idle_timeout() {
        let pool = Arc::new(Pool::<u32>::new(1, 0));
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        pool.done(true);
        let p = Arc::clone(&pool);
        let worker = thread::spawn(move || p.wait_take(Some(Duration::from_secs(600))));
        while pool.stats().idle == 0 {
            thread::yield_now();
        }
        // Far past the worker's spin (250 µs at most), far before its 600 s
        // idle timeout.
        let until = Instant::now() + Duration::from_millis(200);
        while !worker.is_finished() && Instant::now() < until {
            thread::sleep(Duration::from_millis(1));
        }
        assert!(
            !worker.is_finished(),
            "retired long before its idle timeout"
        );
        pool.submit(7, false).unwrap();
        assert_eq!(job(worker.join().unwrap()), Some(7));
    }

    #[test]
    fn a_worker_woken_in_its_first_wait_passes_an_owed_wake_up_on() {
        // A fresh worker whose first call was taken by a busy worker waits
        // in `wait_take`, which takes a job itself when woken (no claim
        // under the GIL). Woken as the one worker an event loop's pass wakes
        // for short calls, it must pass the wake-up on like `claim_woken`:
        // else the second call waits for the running one while a worker sleeps.
        let mut pool = Pool::new(3, 0);
        pool.worker_spin = Some(Duration::ZERO);
        let pool = Arc::new(pool);
        assert_eq!(pool.submit(0, false).unwrap().spawn, 1);
        assert!(
            job(pool.first_take(None)).is_some(),
            "a call that keeps running"
        );
        for _ in 0..8 {
            pool.record_service(1_000);
        }
        let mut workers = vec![parked_worker(&pool), parked_worker(&pool)];
        for short_call in [1, 2] {
            let (s, owed) = pool.submit_waking(short_call, false, false).ok().unwrap();
            assert!(s.spawn == 0 && owed);
        }
        assert_eq!(pool.wake_owed(), 0);
        let mut taken: Vec<_> = returned(&mut workers, 2).into_iter().map(job).collect();
        taken.sort();
        assert_eq!(taken, vec![Some(1), Some(2)]);
    }

    #[test]
    fn a_submission_asks_for_every_thread_its_owed_jobs_need() {
        // Calls queued with their wake-ups owed, then the one parked worker
        // woken by a plain submission: the jobs left need two new threads,
        // and the caller must be told to start both. Told "start one", the
        // pool would count a thread that never comes as on its way, and a
        // job would wait for it with every worker parked.
        let pool = Arc::new(Pool::new(4, 0));
        assert_eq!(pool.submit(0, false).unwrap().spawn, 1);
        assert!(
            job(pool.first_take(None)).is_some(),
            "one call keeps running"
        );
        assert_eq!(pool.submit(1, false).unwrap().spawn, 1);
        assert!(job(pool.first_take(None)).is_some());
        pool.done(true);
        let parked = parked_worker(&pool);
        for owed_job in [2, 3] {
            let (s, owed) = pool.submit_waking(owed_job, false, false).ok().unwrap();
            assert!(s.spawn == 0 && owed);
        }
        let s = pool.submit(4, false).unwrap();
        assert_eq!(
            s.spawn, 2,
            "one job for the woken worker, two for new threads"
        );
        let mut taken = vec![
            job(pool.first_take(None)),
            job(pool.first_take(None)),
            job(join_or_fail(&pool, parked)),
        ];
        taken.sort();
        assert_eq!(taken, vec![Some(2), Some(3), Some(4)]);
    }

    /// A worker thread blocked in `wait_take` (see `park_worker`).
    fn parked_worker(pool: &Arc<Pool<u32>>) -> thread::JoinHandle<Take<u32>> {
        park_worker(pool, |p| p.wait_take(None))
    }

    /// Start a worker thread that runs `wait` and return once it is asleep
    /// on the `work` condvar: counted as parked (under the lock its wait lets
    /// go of) and sleeping in the kernel. Counted is not enough: a notify
    /// that comes before the thread reaches its futex wait makes that wait
    /// return at once *and* wakes another parked thread, so one notify can
    /// wake two (harmless in the pool, which counts such wake-ups, but not in
    /// a test that counts wake-ups). Idle is even less: an idle worker that
    /// has not parked yet counts as on its way to the queue.
    fn park_worker(
        pool: &Arc<Pool<u32>>,
        wait: impl FnOnce(&Pool<u32>) -> Take<u32> + Send + 'static,
    ) -> thread::JoinHandle<Take<u32>> {
        let parked_before = pool.lock().parked;
        let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let (p, t) = (Arc::clone(pool), Arc::clone(&tid));
        let worker = thread::spawn(move || {
            t.store(unsafe { libc::gettid() }, Ordering::Release);
            wait(&p)
        });
        while pool.lock().parked == parked_before {
            thread::yield_now();
        }
        let stat = format!("/proc/self/task/{}/stat", tid.load(Ordering::Acquire));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // The state letter follows the command name's closing parenthesis.
            match std::fs::read_to_string(&stat) {
                Ok(text)
                    if text
                        .rsplit(')')
                        .next()
                        .map(str::trim_start)
                        .is_some_and(|rest| rest.starts_with('S')) =>
                {
                    break
                }
                Ok(_) if Instant::now() < deadline => thread::yield_now(),
                _ => panic!("the parked worker never went to sleep ({stat})"),
            }
        }
        worker
    }

    /// Join `worker` if it finishes within a generous bound; else shut the
    /// pool down (which releases it) and fail instead of hanging.
    fn join_or_fail(pool: &Pool<u32>, worker: thread::JoinHandle<Take<u32>>) -> Take<u32> {
        let until = Instant::now() + Duration::from_secs(30);
        while !worker.is_finished() && Instant::now() < until {
            thread::sleep(Duration::from_millis(1));
        }
        let finished = worker.is_finished();
        pool.shutdown();
        let take = worker.join().unwrap();
        assert!(finished, "the parked worker was never woken");
        take
    }

    #[test]
    fn a_submission_wakes_a_parked_worker_at_the_ceiling() {
        let pool = Arc::new(Pool::<u32>::new(1, 0));
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        pool.done(true);
        let worker = parked_worker(&pool);
        let s = pool.submit(5, false).unwrap();
        assert_eq!(
            s.spawn, 0,
            "at the ceiling: wake the parked worker, start none"
        );
        assert_eq!(s.waiting_at, None, "a woken worker is on its way");
        assert_eq!(job(join_or_fail(&pool, worker)), Some(5));
    }

    #[test]
    fn a_deferred_wake_is_owed_only_while_a_worker_is_on_its_way() {
        let pool = Arc::new(Pool::new(2, 0));
        for _ in 0..2 {
            let (s, _) = pool.submit_waking(0, false, true).ok().unwrap();
            assert_eq!(s.spawn, 1);
        }
        // Both workers arrive, find nothing left to do once the jobs are
        // gone, and park.
        let one = pool.first_take(None);
        let two = pool.first_take(None);
        assert!(job(one).is_some() && job(two).is_some());
        pool.done(true);
        pool.done(true);
        let a = parked_worker(&pool);
        let b = parked_worker(&pool);
        // The first call wakes a worker at once; the second owes its wake.
        let (first, owed) = pool.submit_waking(1, false, false).ok().unwrap();
        assert!(first.spawn == 0 && !owed);
        let (second, owed) = pool.submit_waking(2, false, false).ok().unwrap();
        assert!(second.spawn == 0 && owed);
        assert_eq!(
            pool.wake_owed(),
            0,
            "parked workers are woken, none started"
        );
        let mut taken = vec![job(join_or_fail(&pool, a)), job(join_or_fail(&pool, b))];
        taken.sort();
        assert_eq!(taken, vec![Some(1), Some(2)]);
    }

    #[test]
    fn an_owed_wake_never_strands_a_job() {
        // The owed wake-up is never handed out: the worker already on its
        // way takes every queued job, one after another.
        let pool = Arc::new(Pool::new(2, 0));
        for _ in 0..2 {
            assert_eq!(pool.submit_waking(0, false, true).ok().unwrap().0.spawn, 1);
        }
        assert!(job(pool.first_take(None)).is_some() && job(pool.first_take(None)).is_some());
        pool.done(true);
        pool.done(true);
        let mut workers = vec![parked_worker(&pool), parked_worker(&pool)];
        assert!(!pool.submit_waking(1, false, false).ok().unwrap().1);
        assert!(pool.submit_waking(2, false, false).ok().unwrap().1);
        let mut taken = Vec::new();
        let until = Instant::now() + Duration::from_secs(30);
        while taken.len() < 2 && Instant::now() < until {
            let (woken, parked): (Vec<_>, Vec<_>) =
                workers.into_iter().partition(|w| w.is_finished());
            workers = parked;
            for worker in woken {
                taken.extend(job(worker.join().unwrap()));
                // That worker's call returns; it takes whatever is still queued.
                while let Some(next) = job(pool.done_and_try_take(true)) {
                    taken.push(next);
                }
            }
            thread::sleep(Duration::from_millis(1));
        }
        taken.sort();
        assert_eq!(taken, vec![1, 2], "a queued job was stranded");
        pool.shutdown();
        for worker in workers {
            assert!(job(worker.join().unwrap()).is_none());
        }
    }

    #[test]
    fn abandoning_without_waiting_work_starts_nobody() {
        let pool = Pool::new(1, 0);
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        assert_eq!(pool.abandon_worker(), 0);
        let s = pool.stats();
        assert_eq!(
            (s.max_workers, s.workers, s.running, s.abandoned),
            (1, 0, 0, 1)
        );
    }

    #[test]
    fn shrinking_wakes_a_parked_worker_to_retire() {
        let pool = Arc::new(Pool::<u32>::new(2, 0));
        for i in 0..2 {
            pool.submit(i, false).unwrap();
        }
        claim_every_start(&pool);
        for _ in 0..2 {
            assert!(job(pool.first_take(None)).is_some());
            pool.done(true);
        }
        let one = parked_worker(&pool);
        let two = parked_worker(&pool);
        assert_eq!(pool.resize(1), 0);
        let until = Instant::now() + Duration::from_secs(30);
        while !one.is_finished() && !two.is_finished() && Instant::now() < until {
            thread::sleep(Duration::from_millis(1));
        }
        let retired = one.is_finished() || two.is_finished();
        pool.shutdown();
        assert!(retired, "no parked worker woke up to retire");
        assert_eq!(one.join().unwrap(), Take::Exit);
        assert_eq!(two.join().unwrap(), Take::Exit);
        assert_eq!(pool.stats().max_workers, 1);
    }

    #[test]
    fn drain_hands_back_queued_jobs_in_order_and_counts_them() {
        let pool = Pool::new(1, 0);
        for i in 0..4 {
            pool.submit(i, i % 2 == 0).unwrap();
        }
        assert_eq!(job(pool.first_take(None)), Some(0));
        assert_eq!(pool.drain(), vec![1, 2, 3]);
        let s = pool.stats();
        assert_eq!((s.queued, s.cancelled, s.running), (0, 3, 1));
        pool.submit(4, false).unwrap();
        pool.submit(5, false).unwrap();
        assert_eq!(pool.try_drain(), Some(vec![4, 5]));
        assert_eq!(pool.try_drain(), Some(vec![]));
    }

    #[test]
    fn wait_for_room_waits_while_full_and_wakes_on_room_or_shutdown() {
        let pool = Arc::new(Pool::new(1, 1));
        pool.submit(0, false).unwrap();
        assert!(job(pool.first_take(None)).is_some());
        pool.submit(1, false).unwrap(); // the queue is full now
        assert!(
            !pool.wait_for_room(Duration::from_millis(10)),
            "full: times out"
        );
        let p = Arc::clone(&pool);
        let waiter = thread::spawn(move || p.wait_for_room(Duration::from_secs(600)));
        // Far past the time to block; then making room must wake it, long
        // before its own timeout would end the wait anyway.
        thread::sleep(Duration::from_millis(200));
        assert_eq!(job(pool.done_and_try_take(true)), Some(1));
        let until = Instant::now() + Duration::from_secs(30);
        while !waiter.is_finished() && Instant::now() < until {
            thread::sleep(Duration::from_millis(1));
        }
        let woken = waiter.is_finished();
        if !woken {
            pool.shutdown(); // releases it, so the failure does not hang
        }
        assert!(waiter.join().unwrap());
        assert!(woken, "making room did not wake the waiter");
        assert!(
            pool.wait_for_room(Duration::from_secs(600)),
            "not full: at once"
        );
        pool.submit(2, false).unwrap();
        let p = Arc::clone(&pool);
        let waiter = thread::spawn(move || p.wait_for_room(Duration::from_secs(30)));
        pool.shutdown();
        assert!(waiter.join().unwrap(), "shutdown wakes the waiter");
    }

    #[test]
    fn a_worker_that_never_started_gives_back_its_place() {
        let pool = Pool::new(1, 0);
        assert_eq!(pool.submit(0, false).unwrap().spawn, 1);
        assert_eq!(pool.submit(1, false).unwrap().spawn, 0);
        pool.worker_gone();
        assert_eq!(pool.stats().workers, 0);
        assert_eq!(
            pool.submit(2, false).unwrap().spawn,
            1,
            "its place is free again"
        );
    }

    #[test]
    fn a_start_nobody_claimed_is_reported_to_the_next_submission() {
        // The caller told to start a thread was interrupted before it
        // claimed the start: the next submission is told of it, and one
        // claim (only) makes it good.
        let pool = Pool::new(1, 0);
        let s = pool.submit(0, false).unwrap();
        assert_eq!((s.spawn, s.unclaimed), (1, 1));
        let s = pool.submit(1, false).unwrap();
        assert_eq!(
            (s.spawn, s.unclaimed),
            (0, 1),
            "still owed, not asked again"
        );
        assert!(pool.claim_start());
        assert!(!pool.claim_start(), "one thread per place");
        assert_eq!((pool.unclaimed(), pool.stats().workers), (0, 1));
        assert_eq!(job(pool.first_take(None)), Some(0));
        assert_eq!(job(pool.try_take()), Some(1));
    }

    #[test]
    fn a_claimed_start_given_back_is_asked_for_again() {
        // Its thread was never made: the place is free, and the next
        // submission asks for a thread for the calls still queued.
        let pool = Pool::new(1, 0);
        pool.submit(0, false).unwrap();
        assert!(pool.claim_start());
        pool.worker_gone();
        assert_eq!((pool.unclaimed(), pool.stats().workers), (0, 0));
        let s = pool.submit(1, false).unwrap();
        assert_eq!((s.spawn, s.unclaimed), (1, 1));
        assert!(pool.claim_start());
        assert_eq!(job(pool.first_take(None)), Some(0));
    }

    #[test]
    fn a_failed_start_gives_back_every_owed_start() {
        // Thread.start failed: the starts still owed would fail alike, and
        // while owed they count as workers and as takers on their way.
        let pool = Pool::new(3, 0);
        for i in 0..3 {
            pool.submit(i, false).unwrap();
        }
        assert_eq!((pool.unclaimed(), pool.stats().workers), (3, 3));
        assert!(pool.claim_start());
        pool.start_failed();
        assert_eq!((pool.unclaimed(), pool.stats().workers), (0, 0));
        // The next submission asks for threads for the calls still queued.
        let s = pool.submit(3, false).unwrap();
        assert_eq!((s.spawn, s.unclaimed), (3, 3));
        // Were it refused, its job is withdrawn, not counted as cancelled.
        assert!(pool.withdraw(s.seq).is_some());
        assert!(pool.withdraw(s.seq).is_none());
        assert_eq!(pool.stats().cancelled, 0);
        claim_every_start(&pool);
        assert_eq!(job(pool.first_take(None)), Some(0));
    }

    #[test]
    fn shrinking_drops_the_starts_nobody_claimed() {
        // A thread started for one would only retire, and live threads
        // would outnumber the new ceiling meanwhile.
        let pool = Pool::new(3, 0);
        for i in 0..3 {
            pool.submit(i, false).unwrap();
        }
        assert!(pool.claim_start());
        assert!(job(pool.first_take(None)).is_some());
        assert_eq!((pool.unclaimed(), pool.stats().workers), (2, 3));
        pool.resize(2);
        assert_eq!((pool.unclaimed(), pool.stats().workers), (1, 2));
        pool.resize(1);
        assert_eq!((pool.unclaimed(), pool.stats().workers), (0, 1));
        assert!(!pool.claim_start());
        // The one worker takes the rest in turn.
        assert_eq!(job(pool.done_and_try_take(true)), Some(1));
        assert_eq!(job(pool.done_and_try_take(true)), Some(2));
    }
}
