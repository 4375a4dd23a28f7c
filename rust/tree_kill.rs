//! A process-tree kill armed on a deadline, and its report of what it found.
//!
//! A reader that gets to look only after the deadline fired (another thread
//! held the GIL) sees the same thing whether the command ended by itself long
//! before or the deadline's kill ended it: EOFs, the exit and the deadline's
//! wake-up, all at once. The kill itself can tell them apart: it runs at the
//! deadline, on a thread of its own without the GIL, and sees whether the root
//! had exited yet (a zombie has) and whether a member of the tree still held a
//! pipe the reader was waiting on. This module keeps that in a report the
//! reader waits for before it calls the outcome a timeout.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::proctree::{self, Outcome};
use crate::timer::{next_pause, wait_unchecked, Entry};

/// Where an armed kill stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KillState {
    /// The deadline has not fired yet, or the kill is under way.
    Pending,
    /// The kill ran: what it found and what it signalled.
    Ran(Outcome),
    /// The kill failed (reading `/proc`, signalling): the error's text.
    Failed(String),
    /// It never ran and never will: the deadline was cancelled first, or the
    /// kill's thread died before it reported.
    NotRun,
}

/// The report of one armed kill, shared by the kill and whoever waits for it.
#[derive(Debug)]
pub struct KillReport {
    state: Mutex<KillState>,
    settled: Condvar,
}

impl KillReport {
    fn new() -> Arc<Self> {
        Arc::new(KillReport {
            state: Mutex::new(KillState::Pending),
            settled: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, KillState> {
        // Nothing panics while holding it; a poisoned state is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state now.
    pub fn state(&self) -> KillState {
        self.lock().clone()
    }

    /// Whether the kill found the command still running when it struck: the
    /// root had not exited, or a member of the tree still held a watched pipe
    /// (the reader was waiting for it). `None` unless the kill ran to its end.
    pub fn found_running(&self) -> Option<bool> {
        match &*self.lock() {
            KillState::Ran(outcome) => {
                Some(outcome.root_running || !outcome.pipe_holders.is_empty())
            }
            _ => None,
        }
    }

    /// Settle the report once; later calls change nothing.
    fn settle(&self, state: KillState) {
        let mut now = self.lock();
        if *now == KillState::Pending {
            *now = state;
            self.settled.notify_all();
        }
    }

    /// Wait until the report is settled (true) or `timeout` passes (false).
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        wait_unchecked(|check| self.wait_interruptible(timeout, Duration::MAX, check))
    }

    /// [`KillReport::wait`] that wakes at least every `slice` to call `check`
    /// (to look for a pending Ctrl-C, say); an error from it ends the wait.
    pub fn wait_interruptible<E>(
        &self,
        timeout: Option<Duration>,
        slice: Duration,
        mut check: impl FnMut() -> Result<(), E>,
    ) -> Result<bool, E> {
        let until = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            {
                let state = self.lock();
                if *state != KillState::Pending {
                    return Ok(true);
                }
                let Some(pause) = next_pause(until, slice) else {
                    return Ok(false);
                };
                let (state, _) = self
                    .settled
                    .wait_timeout(state, pause)
                    .unwrap_or_else(|e| e.into_inner());
                if *state != KillState::Pending {
                    return Ok(true);
                }
            }
            check()?;
        }
    }
}

/// One armed kill. Dropped without having run (the deadline was cancelled and
/// its actions dropped, or the kill's thread unwound), it settles the report
/// as `NotRun`, so nobody waits for it in vain.
struct Job {
    pid: i32,
    sig: i32,
    start_time: Option<u64>,
    pipes: Vec<u64>,
    report: Arc<KillReport>,
}

impl Job {
    fn run(&self) {
        let result =
            proctree::signal_tree_watching(self.pid, self.sig, self.start_time, &self.pipes);
        self.report.settle(match result {
            Ok(outcome) => KillState::Ran(outcome),
            Err(e) => KillState::Failed(e.to_string()),
        });
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.report.settle(KillState::NotRun);
    }
}

/// At the expiry of `entry`, kill the tree rooted at `pid` (named by
/// `start_time` when given) with `sig`, noting which members still hold one
/// of `pipes` (inodes; see [`proctree::signal_tree_watching`]). The timer
/// thread only starts a short-lived thread for it, so scanning `/proc` never
/// delays other deadlines. At once if `entry` has already fired; never if it
/// is cancelled first. The caller must have refused protected roots already.
pub fn kill_tree_at(
    entry: &Entry,
    pid: i32,
    sig: i32,
    start_time: Option<u64>,
    pipes: Vec<u64>,
) -> Arc<KillReport> {
    let report = KillReport::new();
    let job = Arc::new(Job {
        pid,
        sig,
        start_time,
        pipes,
        report: Arc::clone(&report),
    });
    entry.add_action(Box::new(move || {
        let on_thread = Arc::clone(&job);
        let spawned = std::thread::Builder::new()
            .name("taut-proctree".into())
            .spawn(move || on_thread.run());
        // If no thread can be started (resource exhaustion), kill inline: late
        // other deadlines are better than a tree that survives its deadline.
        if spawned.is_err() {
            job.run();
        }
    }));
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proctree::{is_running, pipe_inode_of_fd, process_start_time, ProcId};
    use crate::timer;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};

    /// A shell command in a process group of its own, its stdout a pipe to us.
    fn spawn_piped(script: &str) -> Child {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn id_of(pid: i32) -> ProcId {
        ProcId {
            pid,
            start_time: process_start_time(pid).unwrap(),
        }
    }

    fn stdout_inode(child: &Child) -> u64 {
        pipe_inode_of_fd(child.stdout.as_ref().unwrap().as_raw_fd()).unwrap()
    }

    /// Arm on a deadline already in the past: the kill starts at once.
    fn kill_now(child: &Child, pipes: Vec<u64>) -> Arc<KillReport> {
        let entry = timer::arm(Instant::now());
        let pid = child.id() as i32;
        let report = kill_tree_at(&entry, pid, libc::SIGKILL, process_start_time(pid), pipes);
        assert!(
            report.wait(Some(Duration::from_secs(30))),
            "kill never reported"
        );
        report
    }

    fn ran(report: &KillReport) -> Outcome {
        match report.state() {
            KillState::Ran(outcome) => outcome,
            other => panic!("the kill did not run: {other:?}"),
        }
    }

    #[test]
    fn finds_a_root_still_running() {
        let mut child = spawn_piped("exec sleep 30");
        let id = id_of(child.id() as i32);
        let report = kill_now(&child, vec![stdout_inode(&child)]);
        let outcome = ran(&report);
        assert!(outcome.root_running);
        // It holds our stdout pipe, frozen just before the kill.
        assert_eq!(outcome.pipe_holders, vec![id]);
        assert_eq!(outcome.signalled, vec![id]);
        assert_eq!(report.found_running(), Some(true));
        assert!(child.wait().unwrap().code().is_none()); // killed by a signal
    }

    #[test]
    fn a_zombie_root_is_not_running() {
        let mut child = spawn_piped("exit 3");
        let mut out = Vec::new();
        // EOF: the root has closed its pipes; its exit follows at once.
        child
            .stdout
            .as_mut()
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        let pid = child.id() as i32;
        let id = id_of(pid);
        let until = Instant::now() + Duration::from_secs(30);
        while is_running(id) {
            assert!(Instant::now() < until, "never became a zombie");
            std::thread::sleep(Duration::from_millis(1));
        }
        let report = kill_now(&child, vec![stdout_inode(&child)]);
        let outcome = ran(&report);
        assert!(outcome.root_found); // a zombie is still there to be signalled
        assert!(!outcome.root_running);
        assert!(outcome.pipe_holders.is_empty());
        assert_eq!(report.found_running(), Some(false));
        assert_eq!(child.wait().unwrap().code(), Some(3)); // its own exit status
    }

    /// The first line a piped child wrote (its background child's pid).
    fn first_line(child: &mut std::process::Child) -> String {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim().to_owned()
    }

    #[test]
    fn a_grandchild_holding_the_pipe_behind_a_zombie_root_is_found() {
        // The root exits at once; its background child keeps stdout open.
        let mut child = spawn_piped("sleep 30 & echo $!");
        let grandchild = id_of(first_line(&mut child).parse().unwrap());
        let root = id_of(child.id() as i32);
        let until = Instant::now() + Duration::from_secs(30);
        while is_running(root) {
            assert!(Instant::now() < until, "the root never exited");
            std::thread::sleep(Duration::from_millis(1));
        }
        let inode = stdout_inode(&child);
        let report = kill_now(&child, vec![inode]);
        let outcome = ran(&report);
        assert!(!outcome.root_running);
        assert_eq!(outcome.pipe_holders, vec![grandchild]);
        assert!(outcome.signalled.contains(&grandchild));
        assert_eq!(report.found_running(), Some(true));
        // Unwatched, the same kind of tree is found, but not as a holder.
        let mut other = spawn_piped("sleep 30 & echo $!");
        first_line(&mut other); // the root has started its background child
        let other_root = id_of(other.id() as i32);
        while is_running(other_root) {
            assert!(Instant::now() < until, "the root never exited");
            std::thread::sleep(Duration::from_millis(1));
        }
        let report = kill_now(&other, vec![]);
        assert!(ran(&report).pipe_holders.is_empty());
        assert_eq!(report.found_running(), Some(false));
        for mut c in [child, other] {
            let _ = c.wait();
        }
    }

    #[test]
    fn a_grandchild_whose_main_thread_ended_first_still_holds_the_pipe() {
        // Its main thread ends (pthread_exit) while another sleeps on: its
        // /proc/PID/fd is then empty, yet its threads still hold our stdout.
        // The root exits at once, so only the pipe says the call waits on it.
        let code = "import ctypes, threading, time\n\
                    threading.Thread(target=time.sleep, args=(30,)).start()\n\
                    ctypes.CDLL(None).pthread_exit(None)\n";
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("python3 -c \"$CODE\" & echo $!")
            .env("CODE", code)
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let grandchild = id_of(first_line(&mut child).parse().unwrap());
        let root = id_of(child.id() as i32);
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let stat = crate::proctree::read_stat(grandchild.pid).expect("python3 never ran");
            if stat.state == b'Z' && stat.threads > 1 && !is_running(root) {
                break;
            }
            assert!(
                Instant::now() < until,
                "the main thread never ended: {stat:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let inode = stdout_inode(&child);
        let leader_fds = std::fs::read_dir(format!("/proc/{}/fd", grandchild.pid));
        assert_eq!(leader_fds.map(|d| d.count()).unwrap_or(0), 0);
        assert!(crate::proctree::pipes_held_by(grandchild.pid).contains(&inode));
        let report = kill_now(&child, vec![inode]);
        let outcome = ran(&report);
        assert!(!outcome.root_running);
        assert_eq!(outcome.pipe_holders, vec![grandchild]);
        assert!(outcome.signalled.contains(&grandchild));
        assert_eq!(report.found_running(), Some(true));
        while is_running(grandchild) {
            assert!(Instant::now() < until, "the grandchild survived");
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = child.wait();
    }

    #[test]
    fn a_pipe_the_caller_has_closed_keeps_nobody_waiting() {
        // The member holds the pipe, but we no longer do: we wait for nothing.
        let mut child = spawn_piped("exec sleep 30");
        let inode = stdout_inode(&child);
        drop(child.stdout.take());
        let report = kill_now(&child, vec![inode]);
        let outcome = ran(&report);
        assert!(outcome.root_running);
        assert!(outcome.pipe_holders.is_empty());
        let _ = child.wait();
    }

    #[test]
    fn a_cancelled_deadline_settles_the_report_as_not_run() {
        let mut child = spawn_piped("exec sleep 30");
        let pid = child.id() as i32;
        let entry = timer::arm(Instant::now() + Duration::from_secs(3600));
        let report = kill_tree_at(&entry, pid, libc::SIGKILL, process_start_time(pid), vec![]);
        assert_eq!(report.state(), KillState::Pending);
        assert!(!report.wait(Some(Duration::from_millis(1))));
        assert!(entry.cancel());
        // Lopsided: settled by the cancel itself, against a minute.
        assert!(report.wait(Some(Duration::from_secs(60))));
        assert_eq!(report.state(), KillState::NotRun);
        assert_eq!(report.found_running(), None);
        assert!(is_running(id_of(pid)));
        let _ = child.kill();
        let _ = child.wait();
        // Cancelled before arming: never runs either.
        let entry = timer::arm(Instant::now() + Duration::from_secs(3600));
        entry.cancel();
        let report = kill_tree_at(&entry, pid, libc::SIGKILL, None, vec![]);
        assert_eq!(report.state(), KillState::NotRun);
    }

    #[test]
    fn a_failed_kill_is_reported() {
        // Our own process is refused (the binding refuses it before arming).
        let entry = timer::arm(Instant::now());
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let report = kill_tree_at(&entry, me, libc::SIGCONT, None, vec![]);
        assert!(report.wait(Some(Duration::from_secs(30))));
        match report.state() {
            KillState::Failed(text) => assert!(text.contains("caller's own process"), "{text}"),
            other => panic!("not a failure: {other:?}"),
        }
        assert_eq!(report.found_running(), None);
    }

    #[test]
    fn an_interrupted_wait_returns_the_error() {
        let entry = timer::arm(Instant::now() + Duration::from_secs(3600));
        let report = kill_tree_at(&entry, 1, libc::SIGCONT, None, vec![]);
        let mut checks = 0;
        let outcome = report.wait_interruptible(None, Duration::from_millis(1), || {
            checks += 1;
            if checks == 3 {
                Err("interrupted")
            } else {
                Ok(())
            }
        });
        assert_eq!(outcome, Err("interrupted"));
        entry.cancel();
        assert_eq!(
            report.wait_interruptible(None, Duration::from_millis(1), || Err(())),
            Ok(true)
        );
    }
}
