//! Signal a whole process tree on Linux, safely.
//!
//! A timed-out command rarely dies alone: shells leave background jobs, build tools
//! leave compilers, browsers leave renderers, and a grandchild that called `setsid`
//! has left both the process group and the session, so `killpg` misses it. This
//! module finds every member of the tree through `/proc` (parent links, plus the
//! process groups and sessions that members lead, which survive reparenting to
//! init), freezes the tree with `SIGSTOP` until a rescan finds nobody new (so it
//! cannot fork away while it is being killed), then sends the signal, and
//! `SIGCONT` for catchable signals so a `SIGTERM` can be handled.
//!
//! Every process is addressed by its identity, the pid together with its start time
//! (`/proc/PID/stat` field 22), never by a bare pid: signals go through a pidfd
//! opened at discovery and verified against the start time, or, on kernels without
//! pidfds, after re-checking the start time just before `kill`.
//!
//! The caller is never harmed: the caller itself, its ancestors (whose trees hold
//! the caller) and every member of its own process group are never stopped nor
//! signalled, wherever a tree reaches them (parent links, group or session
//! expansion). A root that is such a process is refused; inside a tree they are
//! skipped, not traversed, and reported. The caller's session is never expanded.
//! Nothing here needs Python, so the deadline timer can run it without the GIL.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::time::{Duration, Instant};

/// One process, named by pid and start time (clock ticks after boot), so a pid
/// that was reused by a newer process never matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcId {
    pub pid: i32,
    pub start_time: u64,
}

/// The fields of `/proc/PID/stat` this module needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub state: u8,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    pub start_time: u64,
    /// Live threads (field 20). A main thread that ended before the others
    /// leaves the process showing `Z` while they run on.
    pub threads: u32,
}

impl Stat {
    pub fn id(&self) -> ProcId {
        ProcId {
            pid: self.pid,
            start_time: self.start_time,
        }
    }

    /// Zombies (`Z`) and dead tasks (`X`, `x`) have exited; only their parent's
    /// reaping is left. Not a `Z` whose other threads still run: only its
    /// main thread has ended (a real zombie counts one thread, itself).
    pub fn has_exited(&self) -> bool {
        matches!(self.state, b'X' | b'x') || (self.state == b'Z' && self.threads <= 1)
    }

    /// Whether a stop need not be waited for. A `Z` with live threads counts:
    /// its state says nothing of theirs (one round's wait would be wasted).
    fn is_stopped_or_exited(&self) -> bool {
        matches!(self.state, b'T' | b't' | b'Z' | b'X' | b'x')
    }
}

/// What one call did: whether any root still existed (a zombie counts, as for
/// `kill(2)`), the identities of the processes that were signalled, and those of
/// the protected processes the trees reached and left alone. And what it found
/// alive: whether a root had not exited yet when the call began (a zombie has),
/// and which members, frozen just before the signal, still held one of the
/// watched pipes (see [`signal_tree_watching`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub root_found: bool,
    pub signalled: Vec<ProcId>,
    pub skipped: Vec<ProcId>,
    pub root_running: bool,
    pub pipe_holders: Vec<ProcId>,
}

/// Parse the text of `/proc/PID/stat`. The command name (field 2) is in
/// parentheses and may itself contain spaces, parentheses and non-UTF-8 bytes,
/// so parsing starts after the *last* `)`.
pub fn parse_stat(pid: i32, text: &[u8]) -> Option<Stat> {
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(text.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.bytes().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    // Fields 7..=19 and 21 are not needed; 20 is the thread count, 22 the
    // start time.
    let threads = fields.nth(20 - 7)?.parse().ok()?;
    let start_time = fields.nth(22 - 21)?.parse().ok()?;
    Some(Stat {
        pid,
        state,
        ppid,
        pgrp,
        session,
        start_time,
        threads,
    })
}

/// The current stat of `pid`, or `None` if there is no such process.
pub fn read_stat(pid: i32) -> Option<Stat> {
    if pid <= 0 {
        return None;
    }
    let text = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// The start time of `pid`, or `None` if there is no such process.
pub fn process_start_time(pid: i32) -> Option<u64> {
    read_stat(pid).map(|s| s.start_time)
}

/// Whether this exact process still exists and has not exited (a zombie has).
pub fn is_running(id: ProcId) -> bool {
    matches!(read_stat(id.pid), Some(s) if s.start_time == id.start_time && !s.has_exited())
}

/// Every process visible in `/proc`. Processes that exit during the scan are
/// simply missing from it.
pub fn scan() -> io::Result<Vec<Stat>> {
    let mut out = Vec::with_capacity(512);
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            out.push(stat);
        }
    }
    Ok(out)
}

/// Why a process must be left alone, whatever tree it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protected {
    /// The calling process itself.
    Caller,
    /// The caller's parent, grandparent, ... up to init: its tree holds the caller.
    Ancestor,
    /// A member of the caller's own process group (the group that a terminal's
    /// Ctrl-C, a supervisor's `killpg` and the caller's own shell job address).
    OwnGroup,
}

/// The caller as a kill must see it: its own process, process group and session,
/// and every ancestor seen so far. The caller, its ancestors and the members of
/// its group are never stopped, signalled or traversed; its session is never
/// expanded.
#[derive(Clone, Debug)]
pub struct Own {
    pub pid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// Only grows: a parent that died and let the caller be reparented stays
    /// protected, which errs on the safe side if its pid is reused.
    ancestors: HashSet<i32>,
}

impl Own {
    /// The calling process, with its ancestors read from `/proc`.
    pub fn current() -> Own {
        // SAFETY: these calls take no pointers and cannot fail for the caller.
        let (pid, pgrp, session) = unsafe { (libc::getpid(), libc::getpgrp(), libc::getsid(0)) };
        let mut own = Own::new(pid, pgrp, session);
        own.learn_ancestors(read_stat);
        own
    }

    /// A caller with no known ancestors yet.
    pub fn new(pid: i32, pgrp: i32, session: i32) -> Own {
        Own {
            pid,
            pgrp,
            session,
            ancestors: HashSet::new(),
        }
    }

    /// Follow the parent links from the caller through `lookup` and remember every
    /// ancestor found. Called again on each scan and before the final signal: a
    /// reparenting (to init or a subreaper) can give the caller a new ancestor.
    pub fn learn_ancestors(&mut self, lookup: impl Fn(i32) -> Option<Stat>) {
        // A scan is not an atomic snapshot, so the chain read from it may loop.
        let mut walked = HashSet::new();
        let mut pid = self.pid;
        while walked.insert(pid) {
            let Some(stat) = lookup(pid) else { return };
            if stat.ppid <= 0 {
                return;
            }
            self.ancestors.insert(stat.ppid);
            pid = stat.ppid;
        }
    }

    /// [`Own::learn_ancestors`] over one scan.
    pub fn learn_ancestors_from(&mut self, stats: &[Stat]) {
        let by_pid: HashMap<i32, Stat> = stats.iter().map(|s| (s.pid, *s)).collect();
        self.learn_ancestors(|pid| by_pid.get(&pid).copied());
    }

    /// Whether `stat` must be left alone, and why.
    pub fn protects(&self, stat: &Stat) -> Option<Protected> {
        if stat.pid == self.pid {
            Some(Protected::Caller)
        } else if self.ancestors.contains(&stat.pid) {
            Some(Protected::Ancestor)
        } else if stat.pgrp == self.pgrp {
            Some(Protected::OwnGroup)
        } else {
            None
        }
    }

    /// `InvalidInput` naming `stat`'s pid when it is protected: a target that is
    /// the caller, holds the caller in its tree, or shares the caller's group.
    pub fn refuse(&self, stat: &Stat) -> io::Result<()> {
        let pid = stat.pid;
        let why = match self.protects(stat) {
            None => return Ok(()),
            Some(Protected::Caller) => {
                format!("pid must not be the caller's own process, got {pid}")
            }
            Some(Protected::Ancestor) => format!(
                "pid must not be an ancestor of the caller (its tree holds the caller), got {pid}"
            ),
            Some(Protected::OwnGroup) => format!(
                "pid must not be in the caller's own process group {}, got {pid}; start the \
                 command in a group of its own (start_new_session=True or process_group=0) \
                 to kill its tree",
                self.pgrp
            ),
        };
        Err(io::Error::new(io::ErrorKind::InvalidInput, why))
    }
}

/// One scan's view of the trees rooted at some seeds: the members to signal, in
/// discovery order, and the protected processes the trees reached and left alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    pub members: Vec<Stat>,
    pub skipped: Vec<Stat>,
}

/// The trees rooted at `seeds` within one scan: the seeds still present with the
/// same start time, their descendants by parent link, and every member of a
/// process group or session that a member leads (which is how processes
/// reparented to init are still found). What `own` protects is skipped: the
/// caller and its ancestors end the walk there (their other children are not the
/// tree's); a member of the caller's group is passed through, so its own
/// descendants are still reached. The caller's group and session are never
/// expanded.
pub fn closure(stats: &[Stat], seeds: &HashSet<ProcId>, own: &Own) -> Tree {
    let mut by_pid: HashMap<i32, usize> = HashMap::with_capacity(stats.len());
    let mut children: HashMap<i32, Vec<usize>> = HashMap::new();
    let mut by_pgrp: HashMap<i32, Vec<usize>> = HashMap::new();
    let mut by_session: HashMap<i32, Vec<usize>> = HashMap::new();
    for (i, s) in stats.iter().enumerate() {
        by_pid.insert(s.pid, i);
        children.entry(s.ppid).or_default().push(i);
        by_pgrp.entry(s.pgrp).or_default().push(i);
        by_session.entry(s.session).or_default().push(i);
    }
    let mut seen = vec![false; stats.len()];
    let mut queue = VecDeque::new();
    for seed in seeds {
        if let Some(&i) = by_pid.get(&seed.pid) {
            if stats[i].start_time == seed.start_time && !seen[i] {
                seen[i] = true;
                queue.push_back(i);
            }
        }
    }
    let mut tree = Tree::default();
    while let Some(i) = queue.pop_front() {
        let s = stats[i];
        let mut related: Vec<usize> = Vec::new();
        match own.protects(&s) {
            None => {
                tree.members.push(s);
                related.extend(children.get(&s.pid).into_iter().flatten());
                if s.pid == s.pgrp {
                    related.extend(by_pgrp.get(&s.pgrp).into_iter().flatten());
                }
                if s.pid == s.session && s.session != own.session {
                    related.extend(by_session.get(&s.session).into_iter().flatten());
                }
            }
            Some(Protected::OwnGroup) => {
                tree.skipped.push(s);
                related.extend(children.get(&s.pid).into_iter().flatten());
            }
            Some(Protected::Caller | Protected::Ancestor) => tree.skipped.push(s),
        }
        for j in related {
            if !seen[j] {
                seen[j] = true;
                queue.push_back(j);
            }
        }
    }
    tree
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io;
    use std::os::fd::{FromRawFd, OwnedFd, RawFd};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Cleared the first time the kernel says it has no pidfds (before 5.3, or a
    /// seccomp filter that refuses them); from then on the start-time check is used.
    static PIDFD_SUPPORTED: AtomicBool = AtomicBool::new(true);

    pub fn pidfd_supported() -> bool {
        PIDFD_SUPPORTED.load(Ordering::Relaxed)
    }

    /// `Ok(None)` when pidfds are unavailable; `Err(ESRCH)` when there is no such process.
    pub fn pidfd_open(pid: i32) -> io::Result<Option<OwnedFd>> {
        if !pidfd_supported() {
            return Ok(None);
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor we own.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
        if fd >= 0 {
            // SAFETY: the kernel just returned this descriptor to us alone.
            return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }));
        }
        let err = io::Error::last_os_error();
        if means_no_pidfds(err.raw_os_error()) {
            PIDFD_SUPPORTED.store(false, Ordering::Relaxed);
            return Ok(None);
        }
        Err(err)
    }

    /// Whether `pidfd_open` failing with `errno` says that the kernel gives us no
    /// pidfds at all (ENOSYS before 5.3, EPERM from a seccomp filter; it makes
    /// no permission check of its own), rather than something about one process.
    pub fn means_no_pidfds(errno: Option<i32>) -> bool {
        matches!(errno, Some(libc::ENOSYS) | Some(libc::EPERM))
    }

    pub fn pidfd_send_signal(fd: &OwnedFd, sig: i32) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid pidfd, a plain signal number, no siginfo, no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0 as libc::c_uint,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;
    use std::os::fd::OwnedFd;

    pub fn pidfd_supported() -> bool {
        false
    }
    pub fn pidfd_open(_pid: i32) -> io::Result<Option<OwnedFd>> {
        Ok(None)
    }
    pub fn pidfd_send_signal(_fd: &OwnedFd, _sig: i32) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

/// An OS error about one process or about `/proc`, kept with its errno so that
/// the bindings can raise the matching `OSError` subclass (`PermissionError`,
/// `ProcessLookupError`, ...) with a message that says what failed.
#[derive(Debug)]
pub struct OsFailure {
    pub errno: i32,
    pub what: String,
}

impl std::fmt::Display for OsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", strerror(self.errno), self.what)
    }
}

impl std::error::Error for OsFailure {}

impl OsFailure {
    pub fn error(errno: i32, what: String) -> io::Error {
        io::Error::new(
            io::Error::from_raw_os_error(errno).kind(),
            OsFailure { errno, what },
        )
    }

    /// `err` with `what` added, keeping its errno.
    pub fn wrap(err: io::Error, what: &str) -> io::Error {
        match err.raw_os_error() {
            Some(errno) => Self::error(errno, what.to_owned()),
            None => err,
        }
    }
}

/// The errno and its description (without the " (os error N)" that
/// `io::Error`'s `Display` appends), for an `OSError`'s `strerror`.
pub fn errno_of(err: &io::Error) -> Option<(i32, String)> {
    if let Some(errno) = err.raw_os_error() {
        return Some((errno, strerror(errno)));
    }
    let failure = err.get_ref()?.downcast_ref::<OsFailure>()?;
    Some((failure.errno, failure.to_string()))
}

fn strerror(errno: i32) -> String {
    let text = io::Error::from_raw_os_error(errno).to_string();
    match text.rfind(" (os error ") {
        Some(cut) => text[..cut].to_owned(),
        None => text,
    }
}

/// What became of one signal sent to a [`Member`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    Delivered,
    /// The process is gone, or its pid now names another process.
    Gone,
    /// The kernel refused (EPERM): the process belongs to another user.
    Refused,
}

/// A process about to be signalled, with a pidfd when the kernel has them.
#[derive(Debug)]
pub struct Member {
    pub id: ProcId,
    fd: Option<std::os::fd::OwnedFd>,
}

impl Member {
    /// Pin the process `id` names, with its stat as read after pinning. `None` if
    /// it is gone or its pid now belongs to another process. The start time is
    /// read *after* opening the pidfd: if it still matches, the pidfd refers to
    /// the process that was discovered.
    pub fn open(id: ProcId) -> Option<(Member, Stat)> {
        let fd = sys::pidfd_open(id.pid).ok()?;
        Self::verify(id, fd)
    }

    #[cfg(test)]
    /// Like [`Member::open`] but never uses a pidfd (the fallback for old kernels;
    /// public so the start-time check can be tested on a kernel that has pidfds).
    pub fn open_without_pidfd(id: ProcId) -> Option<(Member, Stat)> {
        Self::verify(id, None)
    }

    fn verify(id: ProcId, fd: Option<std::os::fd::OwnedFd>) -> Option<(Member, Stat)> {
        match read_stat(id.pid) {
            Some(s) if s.start_time == id.start_time => Some((Member { id, fd }, s)),
            _ => None,
        }
    }

    #[cfg(test)]
    pub fn has_pidfd(&self) -> bool {
        self.fd.is_some()
    }

    /// Send `sig`; errors other than "gone" and "refused" are returned.
    pub fn send(&self, sig: i32) -> io::Result<Delivery> {
        let result = match &self.fd {
            Some(fd) => sys::pidfd_send_signal(fd, sig),
            None => {
                // Without a pidfd a small window between this check and kill(2)
                // remains; the start time narrows PID reuse to that window.
                match read_stat(self.id.pid) {
                    Some(s) if s.start_time == self.id.start_time => {}
                    _ => return Ok(Delivery::Gone),
                }
                // SAFETY: a positive pid (it came from a scan of /proc) and a
                // signal number.
                if unsafe { libc::kill(self.id.pid, sig) } == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            }
        };
        match result {
            Ok(()) => Ok(Delivery::Delivered),
            Err(e) => match e.raw_os_error() {
                Some(libc::ESRCH) => Ok(Delivery::Gone),
                Some(libc::EPERM) => Ok(Delivery::Refused),
                _ => Err(e),
            },
        }
    }
}

/// How long one freezing round waits for the processes it stopped to reach the
/// stopped state (a process in uninterruptible sleep stops only when it leaves it).
const STOP_WAIT: Duration = Duration::from_millis(200);
/// A bound on rescans, so a pathological tree cannot keep the caller forever.
const MAX_ROUNDS: usize = 64;

/// Wait until every process in `ids` is stopped or gone, or `limit` has passed.
fn wait_stopped(ids: &[ProcId], limit: Duration) {
    let start = Instant::now();
    let mut pending: Vec<ProcId> = ids.to_vec();
    let mut pause = Duration::from_micros(50);
    loop {
        pending.retain(|id| match read_stat(id.pid) {
            Some(s) if s.start_time == id.start_time => !s.is_stopped_or_exited(),
            _ => false,
        });
        if pending.is_empty() || start.elapsed() >= limit {
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// Validate a signal number before it can reach `kill(2)`.
pub fn check_signal(sig: i32) -> io::Result<()> {
    // SIGRTMAX is at most 64 on Linux; 0 would only probe, and the freeze would
    // leave the tree stopped.
    if (1..=64).contains(&sig) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("sig must be a signal number between 1 and 64, got {sig}"),
        ))
    }
}

/// What [`pin`] made of one process found by a scan.
#[derive(Debug)]
pub enum Pinned {
    /// Gone, or its pid names another process now.
    Gone,
    /// Protected as read after pinning: it joined the caller's group since the
    /// scan (once stopped it cannot any more: a frozen tree cannot call setpgid).
    Protected,
    /// To be signalled; `stopped` if `SIGSTOP` was delivered to it.
    Member { member: Member, stopped: bool },
}

/// Pin the process `id` and, with `freeze`, stop it, unless it is protected now.
/// A zombie is not stopped (it cannot fork) but stays a member, so its group and
/// session are still expanded and it counts as signalled.
pub fn pin(id: ProcId, own: &Own, freeze: bool) -> Pinned {
    let Some((member, now)) = Member::open(id) else {
        return Pinned::Gone;
    };
    if own.protects(&now).is_some() {
        return Pinned::Protected;
    }
    let stopped = freeze
        && !now.has_exited()
        && matches!(member.send(libc::SIGSTOP), Ok(Delivery::Delivered));
    Pinned::Member { member, stopped }
}

/// The last round: `sig` to every member that is not protected now, then
/// `SIGCONT` unless `sig` is `SIGKILL` or `SIGSTOP`. A member that is protected
/// now (it joined the caller's group before its stop took effect) gets only the
/// `SIGCONT` that undoes the stop, and is reported as skipped.
pub fn deliver(members: &[Member], sig: i32, own: &Own) -> io::Result<(Vec<ProcId>, Vec<ProcId>)> {
    let mut signalled = Vec::with_capacity(members.len());
    let mut skipped = Vec::new();
    let mut to_continue = Vec::with_capacity(members.len());
    let mut first_error = None;
    let mut refused = None;
    for member in members {
        let protected = read_stat(member.id.pid).is_some_and(|now| {
            now.start_time == member.id.start_time && own.protects(&now).is_some()
        });
        if protected {
            let _ = member.send(libc::SIGCONT);
            skipped.push(member.id);
            continue;
        }
        to_continue.push(member);
        match member.send(sig) {
            Ok(Delivery::Delivered) => signalled.push(member.id),
            Ok(Delivery::Gone) => {}
            Ok(Delivery::Refused) => {
                refused.get_or_insert(member.id.pid);
            }
            Err(e) => {
                let what = format!("signalling pid {}", member.id.pid);
                first_error.get_or_insert(OsFailure::wrap(e, &what));
            }
        }
    }
    if sig != libc::SIGKILL && sig != libc::SIGSTOP {
        // Also on errors: a frozen tree left behind would be worse than none.
        for member in to_continue {
            let _ = member.send(libc::SIGCONT);
        }
    }
    if signalled.is_empty() {
        if let Some(e) = first_error {
            return Err(e);
        }
        if let Some(pid) = refused {
            // As kill(2) would: nothing was signalled because we may not.
            return Err(OsFailure::error(
                libc::EPERM,
                format!("signalling pid {pid}"),
            ));
        }
    }
    Ok((signalled, skipped))
}

/// Freeze the trees rooted at `roots` (processes named by identity), then send
/// `sig` to every member, then `SIGCONT` unless `sig` is `SIGKILL` or `SIGSTOP`.
/// Protected processes (see [`Own`]) are left alone and reported as skipped,
/// roots included: this is the second round of a graceful kill, whose roots
/// were members a moment ago.
pub fn signal_trees(roots: &[ProcId], sig: i32) -> io::Result<Outcome> {
    signal_trees_scanning(roots, sig, &[], scan)
}

/// [`signal_trees`] with the scan of `/proc` given, so that its failures can be
/// tested: a failed first scan is an error, a failed rescan signals what is
/// already frozen. `pipes`: see [`signal_tree_watching`].
fn signal_trees_scanning(
    roots: &[ProcId],
    sig: i32,
    pipes: &[u64],
    mut scan: impl FnMut() -> io::Result<Vec<Stat>>,
) -> io::Result<Outcome> {
    check_signal(sig)?;
    let mut own = Own::current();
    let roots_now: Vec<Stat> = roots
        .iter()
        .filter_map(|r| read_stat(r.pid).filter(|s| s.start_time == r.start_time))
        .collect();
    if roots_now.is_empty() {
        return Ok(Outcome::default());
    }
    // Read before the freeze, so a root that exits meanwhile (by itself or of
    // the signal) still counts as running: it was when the call began.
    let root_running = roots_now.iter().any(|s| !s.has_exited());
    let mut members: Vec<Member> = Vec::new();
    let mut skipped: Vec<ProcId> = Vec::new();
    let mut known: HashSet<ProcId> = roots.iter().copied().collect();
    let mut tried: HashSet<ProcId> = HashSet::new();
    for round in 0..MAX_ROUNDS {
        let stats = match scan() {
            Ok(stats) => stats,
            Err(e) if round == 0 => return Err(OsFailure::wrap(e, "reading /proc")),
            // Everything found so far is frozen; signal what we have.
            Err(_) => break,
        };
        own.learn_ancestors_from(&stats);
        let tree = closure(&stats, &known, &own);
        for stat in tree.skipped {
            if tried.insert(stat.id()) {
                skipped.push(stat.id());
            }
        }
        let mut stopped = Vec::new();
        for stat in tree.members {
            let id = stat.id();
            if !tried.insert(id) {
                continue;
            }
            match pin(id, &own, sig != libc::SIGCONT) {
                Pinned::Gone => {}
                Pinned::Protected => skipped.push(id),
                Pinned::Member { member, stopped: s } => {
                    known.insert(id);
                    if s {
                        stopped.push(id);
                    }
                    members.push(member);
                }
            }
        }
        if stopped.is_empty() && round > 0 {
            break;
        }
        wait_stopped(&stopped, STOP_WAIT);
    }
    // Frozen members cannot close or pass on descriptors: what they hold now
    // is what they held when the signal comes.
    let pipe_holders = pipe_holders(&members, pipes, own.pid);
    // A reparenting while we scanned may have given the caller a new ancestor.
    own.learn_ancestors(read_stat);
    let (signalled, late) = deliver(&members, sig, &own)?;
    skipped.extend(late);
    Ok(Outcome {
        root_found: true,
        signalled,
        skipped,
        root_running,
        pipe_holders,
    })
}

/// The inode of the pipe that a `/proc/PID/fd/N` link names (`pipe:[INODE]`),
/// or `None` for anything else (files, sockets, anonymous inodes).
pub fn pipe_inode(link: &[u8]) -> Option<u64> {
    let inner = link.strip_prefix(b"pipe:[")?.strip_suffix(b"]")?;
    std::str::from_utf8(inner).ok()?.parse().ok()
}

/// The inodes of the pipes `pid` holds open (empty if its descriptors cannot be
/// read: gone, exited, or another user's).
pub fn pipes_held_by(pid: i32) -> HashSet<u64> {
    pipes_held_under(std::path::Path::new("/proc"), pid)
}

/// [`pipes_held_by`] with `proc` as the procfs mount (a test passes a fake one).
///
/// `PID/fd` is the descriptor table of the process's main thread. Once that
/// thread has ended while others run on (the process then shows `Z`), it is
/// empty, though the table the other threads share, with our pipes in it,
/// lives on: they hold the pipes, and the process must not be missed. So
/// when it is empty or unreadable, `PID/task/TID/fd` is read instead, for the
/// first thread that shows one (an ending thread shows none either). A table
/// that shrank while it was read (its thread ended between the listing and
/// the links: they then fail) does not count as read: the next one is.
fn pipes_held_under(proc: &std::path::Path, pid: i32) -> HashSet<u64> {
    let mut out = HashSet::new();
    if pid <= 0 {
        return out;
    }
    let process = proc.join(pid.to_string());
    if read_pipe_links(&process.join("fd"), &mut out) {
        return out;
    }
    let Ok(tasks) = std::fs::read_dir(process.join("task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if read_pipe_links(&task.path().join("fd"), &mut out) {
            break;
        }
    }
    out
}

/// Add the pipe inodes that the descriptor links in `dir` name to `out`;
/// whether `dir` was read whole: it listed a descriptor, and every link it
/// listed could be read. A link that fails was there a moment before: its
/// thread ended meanwhile (then they all fail from there on, our pipe's
/// among them), or the descriptor was closed; either way another thread's
/// copy of the table is read too, or the holder would be missed.
fn read_pipe_links(dir: &std::path::Path, out: &mut HashSet<u64>) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut any = false;
    let mut whole = true;
    for entry in entries {
        let Ok(entry) = entry else {
            whole = false;
            continue;
        };
        any = true;
        match std::fs::read_link(entry.path()) {
            Ok(link) => out.extend(pipe_inode(link.as_os_str().as_bytes())),
            Err(_) => whole = false,
        }
    }
    any && whole
}

/// The inode of the pipe open as `fd` in this process; `InvalidInput` if `fd`
/// is open but not a pipe, the `fstat` error (EBADF) if it is not open.
pub fn pipe_inode_of_fd(fd: i32) -> io::Result<u64> {
    // SAFETY: fstat only writes the zeroed stat buffer we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        let err = io::Error::last_os_error();
        return Err(OsFailure::wrap(err, &format!("fstat of fd {fd}")));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pipes must hold file descriptors of pipes, got {fd} (not a pipe)"),
        ));
    }
    Ok(st.st_ino as u64)
}

/// The members that hold one of `pipes` which the caller (`caller` pid) still
/// holds too: a pipe the caller has closed (its end of stdin, once all input
/// was written) keeps nobody waiting. A member counts only if it has not
/// exited by the time its descriptors were read (an exited one has none).
fn pipe_holders(members: &[Member], pipes: &[u64], caller: i32) -> Vec<ProcId> {
    if pipes.is_empty() {
        return Vec::new();
    }
    let ours = pipes_held_by(caller);
    let live: HashSet<u64> = pipes.iter().copied().filter(|p| ours.contains(p)).collect();
    if live.is_empty() {
        return Vec::new();
    }
    members
        .iter()
        .filter(|m| {
            // The start time is checked after the descriptors were read: a
            // pid reused meanwhile is not taken for the member.
            !pipes_held_by(m.id.pid).is_disjoint(&live) && is_running(m.id)
        })
        .map(|m| m.id)
        .collect()
}

/// `InvalidInput` if `pid` is a process the caller must never signal (see
/// [`Own`]); `Ok` also when there is no such process.
pub fn check_target(pid: i32) -> io::Result<()> {
    match read_stat(pid) {
        Some(stat) => Own::current().refuse(&stat),
        None => Ok(()),
    }
}

/// Signal the tree rooted at `pid`. With `start_time`, the root must be that
/// exact process (otherwise it counts as gone). `root_found` is false when there
/// is no such process. A root the caller must never signal (itself, an ancestor,
/// a member of its group) is refused with `InvalidInput`.
pub fn signal_tree(pid: i32, sig: i32, start_time: Option<u64>) -> io::Result<Outcome> {
    signal_tree_watching(pid, sig, start_time, &[])
}

/// [`signal_tree`], also reporting which members still held one of `pipes`
/// (pipe inodes, see [`pipe_inode_of_fd`]) that the caller holds too, while
/// they were frozen just before the signal: the members a caller reading
/// those pipes was still waiting for.
pub fn signal_tree_watching(
    pid: i32,
    sig: i32,
    start_time: Option<u64>,
    pipes: &[u64],
) -> io::Result<Outcome> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pid must be a positive process id, got {pid}"),
        ));
    }
    check_signal(sig)?;
    let Some(stat) = read_stat(pid) else {
        return Ok(Outcome::default());
    };
    if start_time.is_some_and(|t| t != stat.start_time) {
        return Ok(Outcome::default());
    }
    Own::current().refuse(&stat)?;
    signal_trees_scanning(&[stat.id()], sig, pipes, scan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};

    /// A shell command in a process group of its own: its tree may be killed.
    fn spawn(script: &str) -> Child {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .process_group(0)
            .spawn()
            .unwrap()
    }

    /// A shell command in the caller's own process group: protected.
    fn spawn_in_our_group(script: &str) -> Child {
        Command::new("sh").arg("-c").arg(script).spawn().unwrap()
    }

    fn reap(mut child: Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    fn id_of(child: &Child) -> ProcId {
        let pid = child.id() as i32;
        ProcId {
            pid,
            start_time: process_start_time(pid).unwrap(),
        }
    }

    /// Whether our child `pid` was stopped and then continued (`CLD_CONTINUED`),
    /// without consuming the report. The kernel records it when the `SIGCONT` is
    /// sent, so it is visible at once, with no waiting.
    fn was_continued(pid: i32) -> bool {
        // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WCONTINUED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        assert_eq!(rc, 0, "waitid: {}", io::Error::last_os_error());
        // SAFETY: waitid filled a SIGCHLD siginfo (or left it zeroed).
        unsafe { info.si_pid() == pid && info.si_code == libc::CLD_CONTINUED }
    }

    fn st(pid: i32, ppid: i32, pgrp: i32, session: i32) -> Stat {
        Stat {
            pid,
            state: b'S',
            ppid,
            pgrp,
            session,
            start_time: pid as u64 * 3,
            threads: 1,
        }
    }

    fn pids(stats: &[Stat]) -> Vec<i32> {
        let mut out: Vec<i32> = stats.iter().map(|s| s.pid).collect();
        out.sort();
        out
    }

    fn seeds(stats: &[Stat]) -> HashSet<ProcId> {
        stats.iter().map(|s| s.id()).collect()
    }

    #[test]
    fn parses_names_with_parentheses_and_spaces() {
        let mut text =
            b"42 (a) b) (c) S 7 8 9 0 -1 4194304 1 2 3 4 5 6 7 8 20 0 1 0 12345 100 200".to_vec();
        text.push(b'\n');
        let s = parse_stat(42, &text).unwrap();
        assert_eq!(
            (s.pid, s.state, s.ppid, s.pgrp, s.session),
            (42, b'S', 7, 8, 9)
        );
        assert_eq!(s.start_time, 12345);
        assert_eq!(s.threads, 1);
        assert!(parse_stat(1, b"1 (x) S 0").is_none());
        assert!(parse_stat(1, b"garbage").is_none());
    }

    #[test]
    fn reads_own_stat() {
        let own = Own::current();
        let s = read_stat(own.pid).unwrap();
        assert_eq!(s.pid, own.pid);
        assert_eq!(s.pgrp, own.pgrp);
        assert_eq!(s.session, own.session);
        assert!(s.start_time > 0);
        assert!(read_stat(-1).is_none());
        assert!(read_stat(0).is_none());
    }

    #[test]
    fn states_that_count_as_exited_or_stopped() {
        for (state, exited, stopped_or_exited) in [
            (b'R', false, false),
            (b'S', false, false),
            (b'D', false, false),
            (b'T', false, true),
            (b't', false, true),
            (b'Z', true, true),
            (b'X', true, true),
            (b'x', true, true),
        ] {
            let s = Stat {
                state,
                ..st(1, 0, 1, 1)
            };
            assert_eq!(s.has_exited(), exited, "{}", state as char);
            assert_eq!(
                s.is_stopped_or_exited(),
                stopped_or_exited,
                "{}",
                state as char
            );
        }
        // A main thread that ended before the others: the process runs on,
        // though its state reads `Z`; whether the others stopped it cannot tell.
        let s = Stat {
            state: b'Z',
            threads: 2,
            ..st(1, 0, 1, 1)
        };
        assert!(!s.has_exited());
        assert!(s.is_stopped_or_exited());
    }

    #[test]
    fn learns_ancestors_through_loops_and_gaps() {
        let table = |stats: Vec<Stat>| move |pid: i32| stats.iter().find(|s| s.pid == pid).copied();
        let mut own = Own::new(10, 10, 3);
        own.learn_ancestors(table(vec![
            st(10, 5, 10, 3),
            st(5, 1, 5, 3),
            st(1, 0, 0, 0),
        ]));
        assert_eq!(own.protects(&st(5, 1, 5, 3)), Some(Protected::Ancestor));
        assert_eq!(own.protects(&st(1, 0, 0, 0)), Some(Protected::Ancestor));
        // A scan is no snapshot: a chain that loops still ends.
        own.learn_ancestors(table(vec![
            st(10, 7, 10, 3),
            st(7, 8, 7, 3),
            st(8, 7, 8, 3),
        ]));
        for pid in [5, 1, 7, 8] {
            assert_eq!(own.protects(&st(pid, 0, pid, 3)), Some(Protected::Ancestor));
        }
        // Unknown processes and a caller missing from the table add nothing.
        let mut fresh = Own::new(10, 10, 3);
        fresh.learn_ancestors(table(vec![st(5, 1, 5, 3)]));
        assert_eq!(fresh.protects(&st(5, 1, 5, 3)), None);
        fresh.learn_ancestors_from(&[st(10, 5, 10, 3), st(5, 0, 5, 3)]);
        assert_eq!(fresh.protects(&st(5, 0, 5, 3)), Some(Protected::Ancestor));
        assert_eq!(fresh.protects(&st(0, 0, 0, 0)), None);
    }

    #[test]
    fn protects_the_caller_its_ancestors_and_its_group() {
        let mut own = Own::new(10, 10, 3);
        own.learn_ancestors_from(&[st(10, 5, 10, 3), st(5, 1, 10, 3)]);
        assert_eq!(own.protects(&st(10, 5, 10, 3)), Some(Protected::Caller));
        // An ancestor in our group is named as the ancestor it is.
        assert_eq!(own.protects(&st(5, 1, 10, 3)), Some(Protected::Ancestor));
        assert_eq!(own.protects(&st(30, 10, 10, 3)), Some(Protected::OwnGroup));
        assert_eq!(own.protects(&st(31, 10, 31, 3)), None);
        let msg = |s: Stat| own.refuse(&s).unwrap_err().to_string();
        assert!(msg(st(10, 5, 10, 3)).contains("caller's own process, got 10"));
        assert!(msg(st(5, 1, 10, 3)).contains("ancestor of the caller"));
        assert!(msg(st(5, 1, 10, 3)).ends_with("got 5"));
        assert!(msg(st(30, 10, 10, 3)).contains("own process group 10, got 30"));
        assert_eq!(
            own.refuse(&st(30, 10, 10, 3)).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(own.refuse(&st(31, 10, 31, 3)).is_ok());
    }

    #[test]
    fn closure_follows_parents_groups_and_sessions_but_never_harms_the_caller() {
        let stats = vec![
            st(1, 0, 0, 0),     // init
            st(3, 21, 3, 3),    // member that leads our session: never expanded
            st(5, 1, 40, 3),    // our parent, in group 40
            st(6, 5, 6, 3),     // our sibling: reachable only through 5 or session 3
            st(10, 5, 10, 3),   // us
            st(20, 10, 20, 3),  // root, in a group of its own
            st(21, 20, 20, 3),  // child
            st(22, 21, 22, 22), // grandchild in its own session
            st(23, 1, 23, 22),  // orphan of 22's session (own group), reparented to init
            st(24, 21, 10, 3),  // joined our group: skipped, passed through
            st(25, 24, 25, 25), // its child: still the tree's
            st(26, 1, 20, 3),   // orphan of the root's group
            st(30, 10, 10, 3),  // our other child: never reached
            st(31, 1, 31, 31),  // unrelated
            st(40, 21, 40, 3),  // leads group 40, which holds our parent
        ];
        let mut own = Own::new(10, 10, 3);
        own.learn_ancestors_from(&stats);
        let tree = closure(&stats, &seeds(&stats[5..6]), &own);
        assert_eq!(pids(&tree.members), vec![3, 20, 21, 22, 23, 25, 26, 40]);
        assert_eq!(pids(&tree.skipped), vec![5, 24]);

        // A seed whose pid was reused (other start time) matches nothing.
        let stale: HashSet<ProcId> = [ProcId {
            pid: 20,
            start_time: 1,
        }]
        .into_iter()
        .collect();
        assert_eq!(closure(&stats, &stale, &own), Tree::default());

        // Protected seeds are skipped, and the walk ends at the caller and at
        // its ancestors (their other children are not the tree's).
        let tree = closure(&stats, &seeds(&stats[4..5]), &own);
        assert!(tree.members.is_empty());
        assert_eq!(pids(&tree.skipped), vec![10]);
        let tree = closure(&stats, &seeds(&stats[2..3]), &own);
        assert!(tree.members.is_empty());
        assert_eq!(pids(&tree.skipped), vec![5]);
        // A seed in our group passes its own descendants on, nothing else.
        let tree = closure(&stats, &seeds(&stats[9..10]), &own);
        assert_eq!(pids(&tree.members), vec![25]);
        assert_eq!(pids(&tree.skipped), vec![24]);
    }

    #[test]
    fn refuses_the_caller_its_parent_and_its_group() {
        // SIGCONT: harmless to everyone even if a refusal were missing.
        let own = Own::current();
        let err = signal_tree(own.pid, libc::SIGCONT, None).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("caller's own process"), "{err}");
        // SAFETY: getppid takes nothing and cannot fail.
        let parent = unsafe { libc::getppid() };
        let err = signal_tree(parent, libc::SIGCONT, None).unwrap_err();
        assert!(err.to_string().contains("ancestor of the caller"), "{err}");
        assert!(check_target(parent).is_err());
        assert!(check_target(own.pid).is_err());

        let ours = spawn_in_our_group("exec sleep 30");
        let theirs = spawn("exec sleep 30");
        let err = signal_tree(ours.id() as i32, libc::SIGKILL, None).unwrap_err();
        assert!(err.to_string().contains("own process group"), "{err}");
        assert!(check_target(ours.id() as i32).is_err());
        assert!(check_target(theirs.id() as i32).is_ok());
        assert!(is_running(id_of(&ours)));
        // A root named by identity in a second round is skipped, not refused.
        let outcome = signal_trees(&[id_of(&ours)], libc::SIGKILL).unwrap();
        assert!(outcome.root_found);
        assert!(outcome.signalled.is_empty());
        assert_eq!(outcome.skipped, vec![id_of(&ours)]);
        assert_eq!(
            signal_trees(&[], libc::SIGKILL).unwrap(),
            Outcome::default()
        );
        reap(ours);
        reap(theirs);
    }

    #[test]
    fn pin_stops_only_what_it_may() {
        let own = Own::current();
        let ours = spawn_in_our_group("exec sleep 30");
        assert!(matches!(pin(id_of(&ours), &own, true), Pinned::Protected));
        let theirs = spawn("exec sleep 30");
        let id = id_of(&theirs);
        let wrong = ProcId {
            start_time: id.start_time + 1,
            ..id
        };
        assert!(matches!(pin(wrong, &own, true), Pinned::Gone));
        assert!(matches!(
            pin(id, &own, false),
            Pinned::Member { stopped: false, .. }
        ));
        let Pinned::Member { member, stopped } = pin(id, &own, true) else {
            panic!("not pinned");
        };
        assert!(stopped);
        assert_eq!(member.id, id);
        wait_stopped(&[id], Duration::from_secs(30));
        assert!(read_stat(id.pid).unwrap().is_stopped_or_exited());
        reap(ours);
        reap(theirs);
    }

    #[test]
    fn wait_stopped_gives_up_on_processes_that_do_not_stop() {
        let child = spawn("exec sleep 30");
        let id = id_of(&child);
        let started = Instant::now();
        wait_stopped(&[id], Duration::from_millis(20));
        // A lower bound only: a busy machine can make the wait longer, never
        // shorter. Giving up early would signal a tree that is not frozen yet.
        assert!(started.elapsed() >= Duration::from_millis(20));
        assert!(!read_stat(id.pid).unwrap().is_stopped_or_exited());
        // A pid that names another process now is not waited for (lopsided:
        // at once, against a limit of a minute).
        let other = ProcId {
            start_time: id.start_time + 1,
            ..id
        };
        let started = Instant::now();
        wait_stopped(&[other], Duration::from_secs(60));
        assert!(started.elapsed() < Duration::from_secs(30));
        reap(child);
    }

    #[test]
    fn deliver_continues_catchable_signals_and_skips_our_group() {
        let own = Own::current();
        // Stopped first, as the freeze leaves them.
        let stopped = |child: &Child| {
            let Pinned::Member { member, .. } = pin(id_of(child), &own, true) else {
                panic!("not pinned");
            };
            wait_stopped(&[member.id], Duration::from_secs(30));
            member
        };
        // SIGURG is ignored by sleep: the process survives to be looked at.
        let a = spawn("exec sleep 30");
        let member = stopped(&a);
        assert_eq!(
            deliver(&[member], libc::SIGURG, &own).unwrap(),
            (vec![id_of(&a)], vec![])
        );
        assert!(was_continued(a.id() as i32));
        // SIGSTOP and SIGKILL are never followed by SIGCONT.
        let b = spawn("exec sleep 30");
        let member = stopped(&b);
        assert_eq!(
            deliver(&[member], libc::SIGSTOP, &own).unwrap().0,
            vec![id_of(&b)]
        );
        assert!(!was_continued(b.id() as i32));

        // A member that is in our group by the time of the signal is left alone.
        let ours = spawn_in_our_group("exec sleep 30");
        let (member, _) = Member::open(id_of(&ours)).unwrap();
        let c = spawn("exec sleep 30");
        let (other, _) = Member::open(id_of(&c)).unwrap();
        assert_eq!(
            deliver(&[member, other], libc::SIGKILL, &own).unwrap(),
            (vec![id_of(&c)], vec![id_of(&ours)])
        );
        assert!(is_running(id_of(&ours)));
        for child in [a, b, c, ours] {
            reap(child);
        }
    }

    #[test]
    fn freezes_the_tree_before_signalling() {
        // Without the freeze nothing stops the root, so nothing continues it.
        let child = spawn("exec sleep 30");
        let id = id_of(&child);
        let outcome = signal_tree(id.pid, libc::SIGURG, None).unwrap();
        assert_eq!(outcome.signalled, vec![id]);
        assert!(was_continued(id.pid));
        assert!(is_running(id));
        reap(child);
    }

    #[test]
    fn a_failed_scan_is_an_error_first_and_the_end_of_the_freeze_later() {
        let child = spawn("exec sleep 30");
        let id = id_of(&child);
        let no_proc = || Err(io::Error::from_raw_os_error(libc::ENOENT));
        let err = signal_trees_scanning(&[id], libc::SIGKILL, &[], no_proc).unwrap_err();
        assert_eq!(
            errno_of(&err),
            Some((
                libc::ENOENT,
                "No such file or directory (reading /proc)".to_owned()
            ))
        );
        assert!(is_running(id));
        // The first scan works, the rescan fails: what was frozen is signalled.
        let mut scans = 0;
        let once = || {
            scans += 1;
            if scans == 1 {
                scan()
            } else {
                no_proc()
            }
        };
        let outcome = signal_trees_scanning(&[id], libc::SIGKILL, &[], once).unwrap();
        assert_eq!(outcome.signalled, vec![id]);
        reap(child);
    }

    #[test]
    fn rescans_until_a_round_finds_nobody_new() {
        // b shows up as a's child only from the second scan on, as a process
        // forked between the first scan and a's stop would: it is frozen in
        // round 1, so a round 2 must look for what b may have forked.
        let (a, b) = (spawn("exec sleep 30"), spawn("exec sleep 30"));
        let (a_id, b_id) = (id_of(&a), id_of(&b));
        let mut scans = 0;
        let staged = || {
            scans += 1;
            let mut stats = scan()?;
            stats.retain(|s| s.pid != b_id.pid);
            if scans > 1 {
                stats.push(Stat {
                    ppid: a_id.pid,
                    ..read_stat(b_id.pid).unwrap()
                });
            }
            Ok(stats)
        };
        let outcome = signal_trees_scanning(&[a_id], libc::SIGKILL, &[], staged).unwrap();
        assert_eq!(outcome.signalled, vec![a_id, b_id]);
        assert_eq!(scans, 3);
        // Nothing new after the first round: one rescan, also when nothing was
        // stopped (SIGCONT freezes nothing).
        let c = spawn("exec sleep 30");
        for sig in [libc::SIGCONT, libc::SIGKILL] {
            let mut scans = 0;
            let counted = || {
                scans += 1;
                scan()
            };
            let outcome = signal_trees_scanning(&[id_of(&c)], sig, &[], counted).unwrap();
            assert_eq!(outcome.signalled, vec![id_of(&c)]);
            assert_eq!(scans, 2, "signal {sig}");
        }
        for child in [a, b, c] {
            reap(child);
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn uses_pidfds_where_the_kernel_gives_them() {
        // Asked of the kernel directly, so the test holds on kernels without
        // pidfds too: there the start-time check is the fallback.
        // SAFETY: pidfd_open of our own pid; the descriptor is closed at once.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0 as libc::c_uint) };
        let child = spawn("exec sleep 30");
        let (member, _) = Member::open(id_of(&child)).unwrap();
        if fd >= 0 {
            // SAFETY: the kernel just gave us this descriptor.
            unsafe { libc::close(fd as i32) };
            assert!(member.has_pidfd());
        }
        reap(child);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn only_enosys_and_eperm_mean_no_pidfds() {
        assert!(sys::means_no_pidfds(Some(libc::ENOSYS)));
        assert!(sys::means_no_pidfds(Some(libc::EPERM)));
        assert!(!sys::means_no_pidfds(Some(libc::ESRCH)));
        assert!(!sys::means_no_pidfds(Some(libc::EMFILE)));
        assert!(!sys::means_no_pidfds(None));
    }

    #[test]
    fn os_errors_keep_their_errno() {
        let failure = OsFailure::error(libc::EPERM, "signalling pid 7".into());
        assert_eq!(failure.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(
            errno_of(&failure),
            Some((
                libc::EPERM,
                "Operation not permitted (signalling pid 7)".to_owned()
            ))
        );
        let raw = io::Error::from_raw_os_error(libc::ESRCH);
        assert_eq!(
            errno_of(&raw),
            Some((libc::ESRCH, "No such process".to_owned()))
        );
        let wrapped = OsFailure::wrap(raw, "reading /proc");
        assert_eq!(
            errno_of(&wrapped),
            Some((libc::ESRCH, "No such process (reading /proc)".to_owned()))
        );
        let plain = io::Error::new(io::ErrorKind::InvalidInput, "bad");
        assert!(errno_of(&plain).is_none());
        assert!(errno_of(&OsFailure::wrap(plain, "x")).is_none());
    }

    #[test]
    fn start_time_mismatch_is_never_signalled() {
        let child = spawn("exec sleep 30");
        let pid = child.id() as i32;
        let start = process_start_time(pid).unwrap();
        let wrong = ProcId {
            pid,
            start_time: start + 1,
        };
        assert!(Member::open(wrong).is_none());
        assert!(Member::open_without_pidfd(wrong).is_none());
        // A member discovered earlier whose pid now names another process.
        let stale = Member {
            id: wrong,
            fd: None,
        };
        assert_eq!(stale.send(libc::SIGKILL).unwrap(), Delivery::Gone);
        let right_id = ProcId {
            pid,
            start_time: start,
        };
        assert!(is_running(right_id));
        assert!(
            !signal_tree(pid, libc::SIGKILL, Some(start + 1))
                .unwrap()
                .root_found
        );
        assert!(signal_trees(&[wrong], libc::SIGKILL).unwrap() == Outcome::default());
        assert!(is_running(right_id));
        let (right, stat) = Member::open_without_pidfd(right_id).unwrap();
        assert_eq!(stat.id(), right_id);
        assert!(!right.has_pidfd());
        let (pinned, _) = Member::open(right.id).unwrap();
        assert_eq!(pinned.has_pidfd(), sys::pidfd_supported());
        assert_eq!(right.send(libc::SIGKILL).unwrap(), Delivery::Delivered);
        reap(child);
        // Reaped: the pidfd still names it, and says it is gone.
        assert_eq!(pinned.send(libc::SIGKILL).unwrap(), Delivery::Gone);
        assert!(!is_running(right_id));
    }

    #[test]
    fn kills_grandchild_in_its_own_session() {
        // The shell starts a grandchild in a new session and waits.
        let child = spawn("setsid sleep 30 & wait");
        let pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(10);
        let grandchild = loop {
            let stats = scan().unwrap();
            if let Some(g) = stats.iter().find(|s| s.ppid == pid && s.session == s.pid) {
                break g.id();
            }
            assert!(Instant::now() < deadline, "grandchild never appeared");
            std::thread::sleep(Duration::from_millis(5));
        };
        let outcome = signal_tree(pid, libc::SIGKILL, None).unwrap();
        assert!(outcome.root_found);
        assert!(outcome.signalled.contains(&grandchild));
        assert!(outcome.skipped.is_empty());
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_running(grandchild) {
            assert!(Instant::now() < deadline, "grandchild survived");
            std::thread::sleep(Duration::from_millis(5));
        }
        reap(child);
    }

    #[test]
    fn reads_pipe_inodes_from_fd_links_and_descriptors() {
        assert_eq!(pipe_inode(b"pipe:[2886298]"), Some(2886298));
        for other in [
            &b"socket:[12]"[..],
            b"/dev/null",
            b"pipe:[]",
            b"pipe:[12",
            b"pipe:[-1]",
            b"anon_inode:[eventfd]",
        ] {
            assert_eq!(
                pipe_inode(other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array we own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let inode = pipe_inode_of_fd(fds[0]).unwrap();
        assert_eq!(pipe_inode_of_fd(fds[1]).unwrap(), inode);
        // SAFETY: getpid cannot fail.
        assert!(pipes_held_by(unsafe { libc::getpid() }).contains(&inode));
        // SAFETY: both ours, closed once.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert!(!pipes_held_by(unsafe { libc::getpid() }).contains(&inode));
        // Not fds[0]: another test's thread may have opened that number again.
        let err = pipe_inode_of_fd(-1).unwrap_err();
        assert_eq!(errno_of(&err).map(|(e, _)| e), Some(libc::EBADF));
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        use std::os::fd::AsRawFd;
        let err = pipe_inode_of_fd(file.as_raw_fd()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().ends_with("(not a pipe)"), "{err}");
        assert!(pipes_held_by(-1).is_empty());
    }

    #[test]
    fn a_process_whose_main_thread_ended_shows_its_pipes_through_another_thread() {
        use std::os::unix::fs::symlink;
        use std::path::Path;
        let root = std::env::temp_dir().join(format!(
            "taut-fake-proc-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let links = |dir: &str, targets: &[(&str, &str)]| {
            let dir = root.join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, target) in targets {
                symlink(target, dir.join(name)).unwrap();
            }
        };
        // A normal process: its own table, its threads' never read.
        links("100/fd", &[("0", "/dev/null"), ("1", "pipe:[11]")]);
        links("100/task/101/fd", &[("1", "pipe:[12]")]);
        // The main thread has ended: an empty table; an ending thread shows
        // none either; a live one shows the table they all shared.
        links("200/fd", &[]);
        links("200/task/200/fd", &[]);
        links("200/task/201/fd", &[("1", "pipe:[21]"), ("2", "pipe:[22]")]);
        // The main thread's table unreadable (here: missing).
        links("300/task/301/fd", &[("5", "pipe:[31]")]);
        // A thread that ends while its table is read: listed, its links
        // then fail (here: a file that is no link); the next thread's
        // table is read.
        links("600/fd", &[]);
        links("600/task/600/fd", &[]);
        links("600/task/601/fd", &[]);
        std::fs::write(root.join("600/task/601/fd/1"), b"").unwrap();
        links("600/task/602/fd", &[("1", "pipe:[61]")]);
        // No table anywhere.
        links("400/fd", &[]);
        links("400/task/400/fd", &[]);
        let held = |pid| {
            let mut v: Vec<u64> = pipes_held_under(Path::new(&root), pid)
                .into_iter()
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(held(100), vec![11]);
        assert_eq!(held(200), vec![21, 22]);
        assert_eq!(held(300), vec![31]);
        assert_eq!(held(600), vec![61]);
        // Whichever order the threads are listed in: a table whose links
        // fail does not count as read.
        let mut partial = HashSet::new();
        assert!(!read_pipe_links(
            &root.join("600/task/601/fd"),
            &mut partial
        ));
        assert!(read_pipe_links(&root.join("600/task/602/fd"), &mut partial));
        assert!(held(400).is_empty());
        assert!(held(500).is_empty()); // gone
        assert!(held(0).is_empty() && held(-1).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn gone_root_and_bad_arguments() {
        let mut child = spawn("exit 0");
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(!signal_tree(pid, libc::SIGKILL, None).unwrap().root_found);
        for bad in [0, -1] {
            let err = signal_tree(bad, libc::SIGKILL, None).unwrap_err();
            assert!(err.to_string().ends_with(&format!("got {bad}")), "{err}");
        }
        assert!(signal_tree(1, 0, None).is_err());
        assert!(signal_tree(1, 65, None).is_err());
        assert!(signal_trees(&[], 0).is_err());
        assert!(check_signal(1).is_ok() && check_signal(64).is_ok());
        assert_eq!(
            check_signal(65).unwrap_err().to_string(),
            "sig must be a signal number between 1 and 64, got 65"
        );
    }
}
