#!/usr/bin/env python3
"""Targeted mutation testing of taut's Python layer.

Each mutation breaks one behaviour on purpose: a file, an exact text to
replace (it must occur exactly once) and the tests that must then fail. The
script applies each mutation to a temporary copy of ``python/`` and
``tests/`` (the built ``_core`` extension included), runs the named tests on
that copy and prints whether they caught it. The working tree is never
touched, so it is safe to run while you edit.

    python scripts/mutate.py            # every mutation
    python scripts/mutate.py -k cancel  # the mutations whose name contains "cancel"
    python scripts/mutate.py --list

A mutation whose text is no longer in its file is reported as ``stale``: the
code moved and the mutation needs updating (it is neither caught nor missed).
``harmless`` mutations are kept with the reason they cannot change behaviour
anyone sees; they are run and reported, but do not fail the script.
Exit status: 0 when every non-harmless mutation was caught, 1 otherwise.

Run it with the interpreter that has taut's test dependencies (e.g.
``/work/venv/bin/python`` or the one ``scripts/test.sh`` sets up).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A failing test may wait out a generous bound (tests/_waiting.py LONG = 30 s);
# a mutation that hangs is cut off here and counts as caught.
PER_MUTATION_TIMEOUT = 240


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    harmless: str = ""  # why this mutant cannot be seen, if it cannot


EXECUTOR = "python/taut/executor.py"
GATHER = "python/taut/gather/run.py"
SCOPE = "python/taut/deadline/_scope.py"
SCOPE_CONTEXT = "python/taut/deadline/_context.py"
CLI = "python/taut/cli.py"
BENCH = "python/taut/_bench/__init__.py"
WAKEUPS = "tests/test_executor_wakeups.py"
FUTURE = "python/taut/_future.py"
FUTURE_CONDITION = "python/taut/_future_condition.py"
WAITS = "tests/test_wait_as_completed.py"
ASYNC = "python/taut/_asyncio.py"
LOOP_WAKER = "python/taut/_loop_waker.py"
SQLITE_GATE = "python/taut/journal/sqlite_gate.py"
WORKER = "python/taut/_worker.py"
ASYNC_PATH = "tests/test_asyncio_path.py"
DELIVERY = "tests/test_asyncio_delivery.py"
SIGNAL_INTERRUPT = "python/taut/_signal_interrupt.py"
SCOPE_INTERRUPT = "tests/test_scope_interrupt.py"
SPAWN = "tests/test_spawn_interrupts.py"

MUTATIONS = [
    Mutation(
        "package-stays-a-subclass",
        "python/taut/__init__.py",
        "        if not _unbound:\n",
        "        if False:\n",
        ("tests/test_import.py::test_the_package_is_a_plain_module_again_once_those_modules_are_bound",),
    ),
    Mutation(
        "result-timeout-unclamped",
        FUTURE,
        "    def result(self, timeout: float | None = None) -> _T:\n"
        "        if timeout is not None:\n            timeout = check_timeout(timeout)\n",
        "    def result(self, timeout: float | None = None) -> _T:\n",
        (f"{WAKEUPS}::test_huge_timeout_reaches_the_wait_without_overflow",),
    ),
    Mutation(
        "exception-timeout-unclamped",
        FUTURE,
        "    def exception(self, timeout: float | None = None) -> BaseException | None:\n"
        "        if timeout is not None:\n            timeout = check_timeout(timeout)\n",
        "    def exception(self, timeout: float | None = None) -> BaseException | None:\n",
        (f"{WAKEUPS}::test_huge_timeout_reaches_the_wait_without_overflow",),
    ),
    Mutation(
        "map-timeout-unclamped",
        EXECUTOR,
        "left = check_timeout(timeout)",
        "left = timeout",
        (f"{WAKEUPS}::test_map_with_a_huge_timeout",),
    ),
    Mutation(
        "cancel-queued-no-wakeup",
        FUTURE,
        "# behind it their new positions.\n                self.set_running_or_notify_cancel()",
        "# behind it their new positions.\n                pass",
        (f"{WAKEUPS}::test_cancelling_a_queued_future_wakes_wait_and_as_completed",),
    ),
    Mutation(
        "cancel-queued-is-a-no-op",
        FUTURE,
        "        if self._state in (_RUNNING, _FINISHED):  # states only move forward\n"
        "            return False\n        with _state_lock:",
        "        return False\n        with _state_lock:",
        ("tests/test_executor.py::test_cancelling_a_queued_future_removes_it_and_wakes_waiters",),
    ),
    Mutation(
        "submit-starts-one-thread-for-many",
        EXECUTOR,
        "        while self._start_worker():\n            pass",
        "        self._start_worker()",
        (
            f"{WAKEUPS}::test_calls_queued_with_owed_wake_ups_get_every_thread_they_need",
            "tests/test_executor_compat.py::test_workers_that_could_not_start_give_back_every_place",
        ),
    ),
    # A worker start cut short by a Ctrl-C before its thread existed keeps
    # its place for good (while the traceback holds the slot, as an
    # interactive prompt holds the last one): queued calls wait forever.
    Mutation(
        "interrupted-start-keeps-its-place",
        EXECUTOR,
        "                slot.give_back()\n",
        "",
        (f"{SPAWN}::test_an_interrupt_in_thread_start_before_the_thread_exists",),
    ),
    # A thread that exists, interrupted in Thread.start's wait for it, taken
    # for gone: its place is given back and a second thread starts beside it.
    Mutation(
        "started-thread-taken-for-gone",
        EXECUTOR,
        "            return inner is not None and inner.tb_frame.f_code is _EVENT_WAIT",
        "            return False",
        (f"{SPAWN}::test_an_interrupt_while_thread_start_waits_for_the_new_thread",),
    ),
    Mutation(
        "full-queue-starts-no-owed-worker",
        EXECUTOR,
        "                # queue accepts none).\n                self._spawn()\n",
        "                # queue accepts none).\n",
        (f"{SPAWN}::test_a_full_queue_starts_the_workers_interrupted_submits_left_owed",),
    ),
    Mutation(
        "abandon-starts-no-replacement",
        EXECUTOR,
        "        if unclaimed:\n            try:\n                self._spawn()",
        "        if False:\n            try:\n                self._spawn()",
        (
            f"{WAKEUPS}::test_abandon_starts_a_replacement_for_a_queued_call",
            f"{WAKEUPS}::test_abandon_of_every_worker_keeps_the_ceiling_for_queued_calls",
        ),
    ),
    Mutation(
        "shutdown-cancel-futures-no-wakeup",
        EXECUTOR,
        "if future.cancel():\n                        future.set_running_or_notify_cancel()",
        "future.cancel()",
        ("tests/test_executor.py::test_shutdown_cancel_futures_wakes_wait_and_as_completed",),
    ),
    Mutation(
        "gather-outcomes-reversed",
        GATHER,
        "return [cast(Outcome, e.outcome) for e in self.entries]",
        "return [cast(Outcome, e.outcome) for e in reversed(self.entries)]",
        ("tests/test_gather.py::test_outcomes_come_back_in_input_order_with_values_and_errors",),
    ),
    Mutation(
        "journal-replay-disabled",
        GATHER,
        "            if e.outcome is not None:\n"
        "                continue\n            # A journal keeps terminal",
        "            if True:\n                continue\n            # A journal keeps terminal",
        ("tests/test_durable_gather.py",),
    ),
    Mutation(
        "journal-outcome-never-written",
        GATHER,
        "        self.journal.complete(position, e.call_id, outcome.status, outcome.value, "
        "outcome.error)",
        "        pass",
        ("tests/test_durable_gather.py",),
    ),
    Mutation(
        "scope-ignores-outer-deadline",
        SCOPE,
        "self._effective = at if outer is None else outer if at is None else min(at, outer)",
        "self._effective = at",
        ("tests/test_scopes.py",),
    ),
    Mutation(
        "scope-expiry-only-from-the-timer",
        SCOPE,
        "expired = fired or (self._at is not None and self._clock() >= self._at)",
        "expired = fired",
        ("tests/test_scopes.py",),
    ),
    Mutation(
        "remaining-goes-negative",
        SCOPE_CONTEXT,
        "    return max(0.0, at - _clock.current[0]())",
        "    return at - _clock.current[0]()",
        ("tests/test_scopes.py",),
    ),
    Mutation(
        "bench-info-row-shown-as-met",
        BENCH,
        "        if self.met is None:\n            return INFO",
        '        if self.met is None:\n            return "yes"',
        ("tests/test_bench_output.py",),
    ),
    Mutation(
        "bench-unchecked-row-marked-met",
        BENCH,
        "return row if met is None else dataclasses.replace(row, met=met(row))",
        "return dataclasses.replace(row, met=True if met is None else met(row))",
        ("tests/test_bench_output.py",),
    ),
    Mutation(
        "bench-ratio-of-unpaired-medians",
        BENCH,
        "        if self.ratios:\n            return statistics.median(self.ratios)\n",
        "",
        ("tests/test_bench_output.py",),
    ),
    Mutation(
        "bench-summary-counts-info-rows",
        CLI,
        "checked = [r for r in rows if r.met is not None]",
        "checked = list(rows)",
        ("tests/test_bench_output.py",),
    ),
    Mutation(
        "bench-noise-not-marked",
        BENCH,
        "return low <= 1.0 <= high",
        "return False",
        ("tests/test_bench_output.py",),
    ),
    Mutation(
        "bench-verdict-ignores-direction",
        BENCH,
        'return self.ratio < 1.0 if self.better == "lower" else self.ratio > 1.0',
        "return self.ratio > 1.0",
        ("tests/test_bench_output.py",),
    ),
    Mutation(
        "bench-duplicate-keys-accepted",
        BENCH,
        "if row.key in seen:",
        "if False:",
        ("tests/test_bench_output.py",),
    ),
    Mutation(
        "bench-bad-area-traceback",
        CLI,
        "choices=_area_names(),",
        "choices=None,",
        ("tests/test_bench_output.py",),
    ),
    Mutation(
        "bench-plot-checked-after-the-run",
        CLI,
        'if args.plot and importlib.util.find_spec("matplotlib") is None:',
        "if False:",
        ("tests/test_bench_output.py",),
    ),
    Mutation(
        "waited-exception-tells-no-waiter",
        FUTURE,
        "                        waiter.add_exception(self)",
        "                        pass",
        (WAITS,),
    ),
    Mutation(
        "waited-completion-wakes-no-result-gate",
        FUTURE,
        "            cond.notify_all()\n        self._wake_waiting_results()",
        "            cond.notify_all()\n        self._result_gates = None",
        (WAITS, "tests/test_future_lazy_parts.py"),
    ),
    Mutation(
        "future-condition-notify-wakes-nobody",
        FUTURE_CONDITION,
        "        woken = sleepers[:n]",
        "        woken = sleepers[:0]",
        (WAITS,),
    ),
    Mutation(
        "asyncio-drain-settles-twice",
        LOOP_WAKER,
        "        batch = channel.take_woken(self._reader_fd)\n",
        "        batch = 2 * list(channel.take_woken(self._reader_fd))\n",
        (DELIVERY,),
    ),
    Mutation(
        "asyncio-drain-loses-the-rest-of-a-failed-batch",
        LOOP_WAKER,
        "            batch.give_back()\n            raise",
        "            raise",
        ("tests/test_loop_waker.py::test_a_failing_entry_in_a_drained_batch_loses_none_of_the_others",),
    ),
    Mutation(
        "asyncio-settle-on-a-closed-loop-raises",
        WORKER,
        "    try:\n        waiter.get_loop().call_soon_threadsafe(settle)\n"
        "    except RuntimeError:\n        pass",
        "    waiter.get_loop().call_soon_threadsafe(settle)",
        (f"{DELIVERY}::test_a_loop_closed_with_calls_queued_then_shut_down_with_cancel_futures",),
    ),
    Mutation(
        "closed-loop-channel-keeps-its-loop",
        LOOP_WAKER,
        "                _let_closed_loops_go()\n",
        "",
        # A selector loop tells taut as it closes (LoopWaker._close_alarm);
        # a loop without readers is seen closed only when the next one starts.
        (
            f"{ASYNC_PATH}::"
            "test_a_turn_handed_to_a_loop_without_readers_that_closed_before_running_it_passes_on",
        ),
    ),
    Mutation(
        "loop-close-goes-unnoticed",
        LOOP_WAKER,
        "        self._close_alarm = weakref.ref(alarm, self._alarm_dropped)",
        "        self._close_alarm = weakref.ref(alarm)",
        (
            f"{ASYNC_PATH}::"
            "test_room_for_a_coroutine_whose_loop_closed_while_it_waited_goes_to_the_next",
        ),
    ),
    Mutation(
        "closed-loop-keeps-a-read-turn",
        LOOP_WAKER,
        "                    owner._loop_gone()\n                pending.pop()",
        "                    pass\n                pending.pop()",
        (
            f"{ASYNC_PATH}::"
            "test_a_turn_read_by_a_loop_that_closed_before_its_coroutine_came_back_passes_on",
        ),
    ),
    Mutation(
        "loop-without-readers-refuses-a-full-queue",
        ASYNC,
        "        future = await submit_when_room(executor, submit, loop)",
        "        future = submit()",
        (f"{ASYNC_PATH}::test_run_waits_for_room_also_on_a_loop_without_readers",),
    ),
    Mutation(
        "loop-without-readers-keeps-a-turn-it-cannot-hand-over",
        ASYNC,
        "        except RuntimeError:  # the loop is closed: it will never run it\n"
        "            self._let_go()",
        "        except RuntimeError:  # the loop is closed: it will never run it\n"
        "            pass",
        (
            f"{ASYNC_PATH}::"
            "test_room_for_a_waiter_whose_loop_without_readers_closed_goes_to_the_next_in_line",
        ),
    ),
    Mutation(
        "agather-polls-a-full-taut-queue",
        "python/taut/gather/drive.py",
        "            if isinstance(run.executor, ThreadPoolExecutor) and not inline_sync\n",
        "            if False\n",
        (
            "tests/test_gather_contention.py::"
            "test_agather_waits_in_the_pools_line_of_room_without_polling",
        ),
    ),
    Mutation(
        "closed-loop-drops-a-room-turn",
        ASYNC,
        "        if not self._core.cancel_room_wait(self.place):\n"
        "            self._core.pass_room_on()",
        "        self._core.cancel_room_wait(self.place)",
        (f"{ASYNC_PATH}::test_a_turn_told_to_a_loop_that_closed_unread_passes_on",),
    ),
    Mutation(
        "to-thread-cancel-leaves-the-call-queued",
        ASYNC,
        "                _withdraw(core, seq)\n                raise\n    return await run_in",
        "                raise\n    return await run_in",
        (f"{ASYNC_PATH}::test_a_call_cancelled_while_queued_never_runs",),
    ),
    Mutation(
        "to-thread-on-a-stdlib-default-executor",
        ASYNC,
        "        executor = default_executor()\n    run = contextvars.copy_context().run",
        "        return await asyncio.to_thread(func, *args, **kwargs)\n"
        "    run = contextvars.copy_context().run",
        (f"{ASYNC_PATH}::test_to_thread_copies_the_context_and_uses_a_taut_default_executor",),
    ),
    Mutation(
        "run-ignores-propagate-context",
        ASYNC,
        "    if executor._propagate_context and not in_context:",
        "    if False:",
        (f"{ASYNC_PATH}::test_run_copies_the_context_when_the_executor_propagates_it",),
    ),
    Mutation(
        "run-newcomer-jumps-the-room-line",
        ASYNC,
        "link.channel, waiter, fn, args, kwargs, wake, turn is None, turn is not None",
        "link.channel, waiter, fn, args, kwargs, wake, False, turn is not None",
        (f"{ASYNC_PATH}::test_a_coroutine_arriving_while_others_wait_for_room_queues_behind_them",),
    ),
    Mutation(
        "run-told-waiter-loses-its-place",
        ASYNC,
        "core.wait_for_room_async(waker.channel, notice, place, waker.closing_owners)",
        "core.wait_for_room_async(waker.channel, notice, 0, waker.closing_owners)",
        (
            f"{ASYNC_PATH}::test_a_coroutine_told_there_is_room_keeps_its_place_in_line",
            f"{ASYNC_PATH}::test_a_told_coroutine_refused_then_cancelled_leaves_the_line",
        ),
    ),
    Mutation(
        "told-waiter-takes-the-room-of-a-refused-one-ahead",
        ASYNC,
        "        if not _retry_ahead(core, waker, place):",
        "        if True:",
        (
            f"{ASYNC_PATH}::test_a_told_coroutine_refused_keeps_its_place_though_room_appears_as_it_goes_back",
            f"{ASYNC_PATH}::test_a_told_coroutine_refused_goes_before_those_behind_it_told_with_it",
        ),
    ),
    Mutation(
        "run-cancelled-told-waiter-keeps-the-turn",
        ASYNC,
        "        except BaseException:\n            notice._let_go()\n",
        # Still in line, it leaves it; told, it drops the turn.
        "        except BaseException:\n"
        "            notice.spent()\n"
        "            core.cancel_room_wait(notice.place)\n",
        (f"{ASYNC_PATH}::test_a_coroutine_cancelled_after_being_told_passes_its_turn_on",),
    ),
    Mutation(
        "run-queues-a-non-callable",
        EXECUTOR,
        "        if not callable(fn):\n",
        "        if False:\n",
        (f"{ASYNC_PATH}::test_a_non_callable_is_refused_at_once_naming_the_parameter",),
    ),
    Mutation(
        "submit-waits-for-room-on-a-loop-thread",
        EXECUTOR,
        "                if _running_loop() is not None:",
        "                if False:",
        (f"{ASYNC_PATH}::test_submit_on_a_loop_thread_refuses_at_once_when_full",),
    ),
    Mutation(
        "worker-waits-for-room-it-alone-could-make",
        EXECUTOR,
        "            if core.in_worker():\n",
        "            if False:\n",
        ("tests/test_executor.py::test_the_only_worker_submitting_into_its_full_queue_is_refused_not_stuck",),
    ),
    Mutation(
        "owed-wake-ups-without-backstop",
        ASYNC,
        "            timer.call_soon(self.backstop)\n",
        "",
        (
            f"{ASYNC_PATH}::test_a_call_queued_beside_a_busy_worker_starts_even_while_the_loop_blocks",
        ),
    ),
    Mutation(
        "scope-signal-waits-for-the-gil",
        SIGNAL_INTERRUPT,
        "    deadline.signal_main_thread(SIGNAL)\n",
        "",
        (f"{SCOPE_INTERRUPT}::test_busy_python_code_is_interrupted_without_waiting_for_the_gil",),
    ),
    Mutation(
        "timer-signal-taken-for-the-programs",
        SIGNAL_INTERRUPT,
        "ours, _sent = _sent or sent_by_timer, False",
        "ours, _sent = _sent, False",
        (f"{SCOPE_INTERRUPT}::test_a_timer_signal_that_finds_nothing_due_is_not_passed_on",),
    ),
    Mutation(
        "stale-timer-signal-count-kept",
        SIGNAL_INTERRUPT,
        "        _core._take_sent_signals()\n        current = signal.getsignal(SIGNAL)",
        "        current = signal.getsignal(SIGNAL)",
        (f"{SCOPE_INTERRUPT}::test_a_late_timer_signal_does_not_hide_the_programs_next_signal",),
    ),
    Mutation(
        "concurrent-futures-errors-reach-the-task-unconverted",
        LOOP_WAKER,
        "    converted = _ASYNCIO_ERRORS.get(type(exc))",
        "    converted = None",
        (
            f"{ASYNC_PATH}::"
            "test_a_concurrent_futures_error_reaches_the_task_as_asyncio_would_give_it",
        ),
    ),
    Mutation(
        "run-process-ignores-a-deadline-that-fired-as-the-command-ended",
        "python/taut/process.py",
        "        if deadline is not None and deadline.expired:\n"
        "            timed_out = _killed_while_running(kill)",
        # Only a deadline seen before the loop ended by itself counts.
        "        if deadline is not None and deadline.expired and (\n"
        "            reading or stdin_fd >= 0 or not exited\n"
        "        ):\n"
        "            timed_out = _killed_while_running(kill)",
        (
            "tests/test_process.py::"
            "test_run_process_times_out_when_the_kill_and_the_exit_are_seen_in_one_wake_up",
        ),
    ),
    Mutation(
        "waiting-notices-of-calls-that-never-began-kept",
        "python/taut/tools.py",
        "            never_began = sorted(waited - began)",
        "            never_began = sorted(waited - began - waited)",
        ("tests/test_tools.py::test_a_waiting_notice_is_cleared_for_a_call_the_shut_down_pool_refused",),
    ),
    Mutation(
        "mock-clock-loses-a-step-silently",
        "python/taut/testing.py",
        "        if step > 0 and moved == self.now:",
        "        if False:",
        ("tests/test_testing.py::test_mock_clock_refuses_a_step_too_small_to_move_it",),
    ),
    Mutation(
        "inner-scope-swallows-the-outer-interrupt",
        SCOPE,
        "            if scope._interrupt_due_on(self._thread):\n                return False",
        "            if False:\n                return False",
        (
            f"{SCOPE_INTERRUPT}::test_an_expired_inner_scope_passes_the_outer_interrupt_on",
            "tests/test_scopes.py::test_an_expired_inner_scope_never_swallows_the_outer_interrupt",
        ),
    ),
    Mutation(
        "sqlite-fork-does-not-wait-for-threads-inside",
        SQLITE_GATE,
        "            self._changed.wait_for(lambda: self._inside <= here, timeout=_FORK_WAIT_S)",
        "            pass",
        (
            "tests/test_journal.py::test_a_fork_waits_for_a_journal_call_in_progress",
            "tests/test_journal.py::test_a_fork_waits_for_a_journal_being_opened",
        ),
    ),
    Mutation(
        "sqlite-journal-freed-closes-outside-the-gate",
        "python/taut/journal/sqlite.py",
        "                close_later(self._conn)",
        "                self._conn.close()",
        ("tests/test_journal.py::test_a_journal_freed_without_close_is_closed_inside_the_gate",),
    ),
    Mutation(
        "sqlite-child-closes-the-connection-it-inherited",
        "python/taut/journal/sql.py",
        "            inherited.append(self._conn)\n            self._conn = None",
        "            self._conn.close()\n            self._conn = None",
        ("tests/test_journal.py::test_a_forked_child_never_closes_the_connection_it_inherited",),
    ),
    Mutation(
        "journal-failure-of-a-shut-down-pool-batch-hidden",
        "python/taut/gather/drive.py",
        "        e.outcome is None\n        and not isinstance(exc, JournalError)\n        and ",
        "        ",
        (
            "tests/test_gather_contention.py::"
            "test_a_journal_failure_while_the_pool_is_shut_down_is_not_turned_into_cancelled",
        ),
    ),
    Mutation(
        "future-state-lock-not-reentrant",
        FUTURE,
        "_state_lock = threading.RLock()",
        "_state_lock = threading.Lock()",
        (
            "tests/test_future_signals.py::"
            "test_a_signal_handler_cancelling_a_call_while_the_main_thread_waits",
        ),
    ),
    Mutation(
        "result-sleeps-on-a-future-a-signal-handler-finished",
        FUTURE,
        "            if self._state in _DONE_STATES:\n                # A signal handler ran",
        "            if False:\n                # A signal handler ran",
        (
            "tests/test_future_signals.py::"
            "test_a_signal_handler_cancelling_a_call_while_the_main_thread_waits",
        ),
    ),
    Mutation(
        "process-end-seen-late-counts-as-timed-out",
        "python/taut/process.py",
        "    return kill.found_running is not False",
        "    return True",
        (
            "tests/test_process.py::"
            "test_a_command_done_long_before_the_deadline_is_not_timed_out_when_first_seen_late",
        ),
    ),
    Mutation(
        "fork-copies-a-module-lock-another-thread-holds",
        "python/taut/_fork_locks.py",
        "        lock._at_fork_reinit()  # type: ignore[attr-defined]",
        "        pass",
        (
            "tests/test_fork_safety.py::"
            "test_child_forked_while_another_thread_holds_tauts_module_locks_gets_them_free",
        ),
    ),
]


def _copy_tree(dest: Path) -> None:
    for part in ("python", "tests"):
        shutil.copytree(
            ROOT / part,
            dest / part,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"),
        )
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")


def _run_tests(tree: Path, tests: tuple[str, ...]) -> tuple[int | None, str]:
    env = dict(os.environ, PYTHONPATH=str(tree / "python"), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    try:
        proc = subprocess.run(
            cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=PER_MUTATION_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return None, "timed out (hang)"
    tail = (proc.stdout.strip().splitlines() or [""])[-1]
    return proc.returncode, tail


def run_one(mutation: Mutation) -> str:
    with tempfile.TemporaryDirectory(prefix="taut-mutant-") as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        target = tree / mutation.path
        text = target.read_text(encoding="utf-8")
        if text.count(mutation.old) != 1:
            return f"stale ({text.count(mutation.old)} matches of the text in {mutation.path})"
        target.write_text(text.replace(mutation.old, mutation.new), encoding="utf-8")
        code, tail = _run_tests(tree, mutation.tests)
    if code is None or code == 1:
        return f"caught ({tail})"
    if code == 0:
        return f"missed ({tail})"
    # 2 = interrupted/collection error, 4 = usage, 5 = no tests: not a verdict.
    return f"error (pytest exit {code}: {tail})"


def baseline(mutations: list[Mutation]) -> bool:
    """The named tests must pass on the unmutated code, or no verdict means anything."""
    tests = tuple(dict.fromkeys(t for m in mutations for t in m.tests))
    with tempfile.TemporaryDirectory(prefix="taut-baseline-") as tmp:
        _copy_tree(Path(tmp))
        code, tail = _run_tests(Path(tmp), tests)
    print(f"baseline: {'ok' if code == 0 else 'FAILED'} ({tail})", flush=True)
    return code == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-k", dest="pattern", help="only mutations whose name contains this (comma: any of)"
    )
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    args = parser.parse_args(argv)
    patterns = args.pattern.split(",") if args.pattern else [""]
    chosen = [m for m in MUTATIONS if any(p in m.name for p in patterns)]
    if args.list:
        for m in chosen:
            print(f"{m.name:36} {m.path}  ->  {' '.join(m.tests)}")
        return 0
    if not chosen:
        parser.error(f"no mutation name contains {args.pattern!r}")
    if not args.no_baseline and not baseline(chosen):
        return 2
    counts = {"caught": 0, "missed": 0, "harmless": 0, "stale": 0, "error": 0}
    for m in chosen:
        start = time.monotonic()
        verdict = run_one(m)
        kind = verdict.split(" ")[0]
        if m.harmless and kind == "missed":
            kind, verdict = "harmless", f"harmless: {m.harmless}"
        counts[kind] += 1
        print(f"{m.name:36} {verdict}  [{time.monotonic() - start:.0f} s]", flush=True)
    print(", ".join(f"{n} {k}" for k, n in counts.items()))
    return 0 if counts["missed"] == counts["stale"] == counts["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
