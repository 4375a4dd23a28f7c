//! The timer thread's life cycle: `shutdown` (interpreter exit) and
//! `reset_after_fork` (a forked child). Both act on the process-wide timer,
//! so they live in this integration test, a process of its own, and run one
//! after the other in a single test instead of racing the unit tests.

use std::time::{Duration, Instant};

use _core::timer::{arm, heap_len, is_running, reset_after_fork, shutdown};

const LONG: Duration = Duration::from_secs(10);

#[test]
fn shutdown_and_reset_after_fork() {
    // Shutdown joins the timer thread; a due entry then has no one to fire
    // it until the next arm starts a new thread (which fires it at once).
    let warm = arm(Instant::now());
    assert!(warm.wait(Some(LONG)));
    assert!(is_running());
    shutdown();
    assert!(!is_running());
    let far = arm(Instant::now() + Duration::from_secs(3600));
    // Arming started a new thread: shutdown is not permanent.
    assert!(is_running());
    assert!(far.cancel());

    let stranded = {
        let e = arm(Instant::now() + Duration::from_secs(3600));
        shutdown();
        e
    };
    assert!(!is_running());
    assert!(stranded.is_pending(), "shutdown leaves entries armed");
    let next = arm(Instant::now());
    assert!(next.wait(Some(LONG)));
    assert!(stranded.cancel());

    // After a fork the parent's state is forgotten, never touched: an empty
    // heap and no timer thread, until the child's first arm starts one.
    let parent = arm(Instant::now() + Duration::from_secs(3600));
    assert!(heap_len() >= 1 && is_running());
    reset_after_fork();
    assert_eq!(heap_len(), 0);
    assert!(!is_running());
    let child = arm(Instant::now());
    assert!(child.wait(Some(LONG)));
    assert!(is_running() && heap_len() == 0);
    assert!(parent.is_pending(), "the parent's entries are left alone");
}
