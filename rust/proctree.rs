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
//! pidfds, after re-checking the start time just before `kill`. The caller's own
//! process is never signalled, and the caller's own process group and session are
//! never expanded. Nothing here needs Python, so the deadline timer can run it
//! without the GIL.

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
}

impl Stat {
    pub fn id(&self) -> ProcId {
        ProcId {
            pid: self.pid,
            start_time: self.start_time,
        }
    }

    /// Zombies (`Z`) and dead tasks (`X`, `x`) have exited; only their parent's
    /// reaping is left.
    pub fn has_exited(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }

    fn is_stopped_or_exited(&self) -> bool {
        matches!(self.state, b'T' | b't') || self.has_exited()
    }
}

/// What one call did: whether any root still existed (a zombie counts, as for
/// `kill(2)`), and the identities of the processes that were signalled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub root_found: bool,
    pub signalled: Vec<ProcId>,
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
    // Fields 7..=21 are not needed; field 22 is the start time.
    let start_time = fields.nth(22 - 7)?.parse().ok()?;
    Some(Stat {
        pid,
        state,
        ppid,
        pgrp,
        session,
        start_time,
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

/// The caller's own process, process group and session: never signalled, never
/// expanded.
#[derive(Clone, Copy, Debug)]
pub struct Own {
    pub pid: i32,
    pub pgrp: i32,
    pub session: i32,
}

impl Own {
    pub fn current() -> Own {
        // SAFETY: these calls take no pointers and cannot fail for the caller.
        unsafe {
            Own {
                pid: libc::getpid(),
                pgrp: libc::getpgrp(),
                session: libc::getsid(0),
            }
        }
    }
}

/// The members of the trees rooted at `seeds` within one scan: the seeds still
/// present with the same start time, their descendants by parent link, and every
/// member of a process group or session that a member leads (which is how
/// processes reparented to init are still found). The caller's own process is
/// neither a member nor traversed, and its own group and session are never
/// expanded.
pub fn closure(stats: &[Stat], seeds: &HashSet<ProcId>, own: Own) -> Vec<Stat> {
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
            if stats[i].start_time == seed.start_time && !seen[i] && stats[i].pid != own.pid {
                seen[i] = true;
                queue.push_back(i);
            }
        }
    }
    let mut out = Vec::new();
    while let Some(i) = queue.pop_front() {
        let s = stats[i];
        out.push(s);
        let mut related: Vec<usize> = children.get(&s.pid).cloned().unwrap_or_default();
        if s.pid == s.pgrp && s.pgrp != own.pgrp {
            related.extend(by_pgrp.get(&s.pgrp).into_iter().flatten());
        }
        if s.pid == s.session && s.session != own.session {
            related.extend(by_session.get(&s.session).into_iter().flatten());
        }
        for j in related {
            if !seen[j] && stats[j].pid != own.pid {
                seen[j] = true;
                queue.push_back(j);
            }
        }
    }
    out
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
        match err.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EPERM) => {
                PIDFD_SUPPORTED.store(false, Ordering::Relaxed);
                Ok(None)
            }
            _ => Err(err),
        }
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

/// A process about to be signalled, with a pidfd when the kernel has them.
#[derive(Debug)]
pub struct Member {
    pub id: ProcId,
    fd: Option<std::os::fd::OwnedFd>,
}

impl Member {
    /// Pin the process `id` names. `None` if it is gone or its pid now belongs to
    /// another process. The start time is read *after* opening the pidfd: if it
    /// still matches, the pidfd refers to the process that was discovered.
    pub fn open(id: ProcId) -> Option<Member> {
        let fd = sys::pidfd_open(id.pid).ok()?;
        Self::verify(id, fd)
    }

    #[cfg(test)]
    /// Like [`Member::open`] but never uses a pidfd (the fallback for old kernels;
    /// public so the start-time check can be tested on a kernel that has pidfds).
    pub fn open_without_pidfd(id: ProcId) -> Option<Member> {
        Self::verify(id, None)
    }

    fn verify(id: ProcId, fd: Option<std::os::fd::OwnedFd>) -> Option<Member> {
        match read_stat(id.pid) {
            Some(s) if s.start_time == id.start_time => Some(Member { id, fd }),
            _ => None,
        }
    }

    #[cfg(test)]
    pub fn has_pidfd(&self) -> bool {
        self.fd.is_some()
    }

    /// Send `sig`. `Ok(false)` if the process is gone, is no longer the same
    /// process, or may not be signalled by us (EPERM); other errors are returned.
    pub fn send(&self, sig: i32) -> io::Result<bool> {
        let result = match &self.fd {
            Some(fd) => sys::pidfd_send_signal(fd, sig),
            None => {
                // Without a pidfd a small window between this check and kill(2)
                // remains; the start time narrows PID reuse to that window.
                match read_stat(self.id.pid) {
                    Some(s) if s.start_time == self.id.start_time => {}
                    _ => return Ok(false),
                }
                // SAFETY: a positive pid (checked at construction) and a signal number.
                if unsafe { libc::kill(self.id.pid, sig) } == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            }
        };
        match result {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ESRCH) | Some(libc::EPERM)) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// How long one freezing round waits for the processes it stopped to reach the
/// stopped state (a process in uninterruptible sleep stops only when it leaves it).
const STOP_WAIT: Duration = Duration::from_millis(200);
/// A bound on rescans, so a pathological tree cannot keep the caller forever.
const MAX_ROUNDS: usize = 64;

fn wait_stopped(ids: &[ProcId]) {
    let start = Instant::now();
    let mut pending: Vec<ProcId> = ids.to_vec();
    let mut pause = Duration::from_micros(50);
    loop {
        pending.retain(|id| match read_stat(id.pid) {
            Some(s) if s.start_time == id.start_time => !s.is_stopped_or_exited(),
            _ => false,
        });
        if pending.is_empty() || start.elapsed() >= STOP_WAIT {
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

/// Freeze the trees rooted at `roots` (processes named by identity), then send
/// `sig` to every member, then `SIGCONT` unless `sig` is `SIGKILL` or `SIGSTOP`.
pub fn signal_trees(roots: &[ProcId], sig: i32) -> io::Result<Outcome> {
    check_signal(sig)?;
    let own = Own::current();
    let root_found = roots.iter().any(|r| {
        r.pid > 0
            && r.pid != own.pid
            && read_stat(r.pid).is_some_and(|s| s.start_time == r.start_time)
    });
    if !root_found {
        return Ok(Outcome::default());
    }
    let mut members: Vec<Member> = Vec::new();
    let mut known: HashSet<ProcId> = roots.iter().copied().filter(|r| r.pid > 0).collect();
    let mut tried: HashSet<ProcId> = HashSet::new();
    for round in 0..MAX_ROUNDS {
        let stats = match scan() {
            Ok(stats) => stats,
            Err(e) if round == 0 => return Err(e),
            // Everything found so far is frozen; signal what we have.
            Err(_) => break,
        };
        let found = closure(&stats, &known, own);
        let mut stopped = Vec::new();
        for stat in found {
            let id = stat.id();
            if !tried.insert(id) {
                continue;
            }
            known.insert(id);
            let Some(member) = Member::open(id) else {
                continue;
            };
            // A zombie cannot be stopped and cannot fork; keep it as a member so
            // its group and session are still expanded and it counts as signalled.
            if !stat.has_exited()
                && sig != libc::SIGCONT
                && member.send(libc::SIGSTOP).unwrap_or(false)
            {
                stopped.push(id);
            }
            members.push(member);
        }
        if stopped.is_empty() && round > 0 {
            break;
        }
        wait_stopped(&stopped);
    }
    let mut signalled = Vec::with_capacity(members.len());
    let mut first_error = None;
    for member in &members {
        match member.send(sig) {
            Ok(true) => signalled.push(member.id),
            Ok(false) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if sig != libc::SIGKILL && sig != libc::SIGSTOP {
        // Also on errors: a frozen tree left behind would be worse than none.
        for member in &members {
            let _ = member.send(libc::SIGCONT);
        }
    }
    match first_error {
        Some(e) if signalled.is_empty() => Err(e),
        _ => Ok(Outcome {
            root_found,
            signalled,
        }),
    }
}

/// Signal the tree rooted at `pid`. With `start_time`, the root must be that
/// exact process (otherwise it counts as gone). `root_found` is false when there
/// is no such process; the caller's own pid is refused.
pub fn signal_tree(pid: i32, sig: i32, start_time: Option<u64>) -> io::Result<Outcome> {
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
    signal_trees(&[stat.id()], sig)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    fn spawn(script: &str) -> Child {
        Command::new("sh").arg("-c").arg(script).spawn().unwrap()
    }

    fn reap(mut child: Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn parses_names_with_parentheses_and_spaces() {
        let mut text =
            b"42 (a) b) (c) S 7 8 9 0 -1 4194304 1 2 3 4 5 6 7 8 20 0 1 0 12345 100 200".to_vec();
        text.push(b'\n');
        let s = parse_stat(42, &text).unwrap();
        assert_eq!((s.state, s.ppid, s.pgrp, s.session), (b'S', 7, 8, 9));
        assert_eq!(s.start_time, 12345);
        assert!(parse_stat(1, b"1 (x) S 0").is_none());
        assert!(parse_stat(1, b"garbage").is_none());
    }

    #[test]
    fn reads_own_stat() {
        let own = Own::current();
        let s = read_stat(own.pid).unwrap();
        assert_eq!(s.pid, own.pid);
        assert_eq!(s.pgrp, own.pgrp);
        assert!(s.start_time > 0);
        assert!(read_stat(-1).is_none());
    }

    #[test]
    fn closure_follows_parents_groups_and_sessions_but_not_our_own() {
        let own = Own {
            pid: 10,
            pgrp: 10,
            session: 10,
        };
        let st = |pid, ppid, pgrp, session| Stat {
            pid,
            state: b'S',
            ppid,
            pgrp,
            session,
            start_time: pid as u64 * 3,
        };
        let stats = vec![
            st(10, 1, 10, 10),  // us
            st(20, 10, 10, 10), // root, in our group
            st(21, 20, 10, 10), // child
            st(22, 21, 22, 22), // grandchild in its own session
            st(23, 1, 22, 22),  // orphan of 22's session, reparented to init
            st(30, 10, 10, 10), // our other child: never reached
            st(31, 1, 31, 31),  // unrelated
        ];
        let seeds: HashSet<ProcId> = [stats[1].id()].into_iter().collect();
        let mut pids: Vec<i32> = closure(&stats, &seeds, own).iter().map(|s| s.pid).collect();
        pids.sort();
        assert_eq!(pids, vec![20, 21, 22, 23]);

        // A seed whose pid was reused (other start time) matches nothing.
        let stale: HashSet<ProcId> = [ProcId {
            pid: 20,
            start_time: 1,
        }]
        .into_iter()
        .collect();
        assert!(closure(&stats, &stale, own).is_empty());

        // Our own pid is never a member even when it descends from the root.
        let parent: HashSet<ProcId> = [ProcId {
            pid: 10,
            start_time: 30,
        }]
        .into_iter()
        .collect();
        assert!(closure(&stats, &parent, own).is_empty());
    }

    #[test]
    fn start_time_mismatch_is_never_signalled() {
        let child = spawn("sleep 30");
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
        assert!(!stale.send(libc::SIGKILL).unwrap());
        assert!(is_running(ProcId {
            pid,
            start_time: start
        }));
        assert!(
            !signal_tree(pid, libc::SIGKILL, Some(start + 1))
                .unwrap()
                .root_found
        );
        assert!(is_running(ProcId {
            pid,
            start_time: start
        }));
        let right = Member::open_without_pidfd(ProcId {
            pid,
            start_time: start,
        })
        .unwrap();
        assert!(!right.has_pidfd());
        let pinned = Member::open(right.id).unwrap();
        assert_eq!(pinned.has_pidfd(), sys::pidfd_supported());
        assert!(right.send(libc::SIGKILL).unwrap());
        reap(child);
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
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_running(grandchild) {
            assert!(Instant::now() < deadline, "grandchild survived");
            std::thread::sleep(Duration::from_millis(5));
        }
        reap(child);
    }

    #[test]
    fn gone_root_and_bad_arguments() {
        let mut child = spawn("exit 0");
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(!signal_tree(pid, libc::SIGKILL, None).unwrap().root_found);
        assert!(signal_tree(0, libc::SIGKILL, None).is_err());
        assert!(signal_tree(-1, libc::SIGKILL, None).is_err());
        assert!(signal_tree(1, 0, None).is_err());
        assert!(signal_tree(1, 65, None).is_err());
    }
}
