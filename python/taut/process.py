"""Kill whole process trees, and run commands whose deadline really kills them.

``kill_process_tree`` reaches every descendant of a process through ``/proc``,
including grandchildren that started a session of their own and orphans
reparented to init that still belong to a session or process group the tree
leads. The tree is frozen with ``SIGSTOP`` until a rescan finds nobody new, so it
cannot fork away while it is being killed; processes are addressed by pid *and*
start time (through pidfds where the kernel has them), so a reused pid is never
signalled.

The caller is never harmed: the caller itself, its ancestors (parent,
grandparent, ... whose trees hold the caller) and every member of the caller's
own process group are never stopped nor signalled. Naming such a process as the
target is a ``ValueError``; reached inside a tree (a descendant that joined the
caller's group, an ancestor in a group the tree leads) it is left alone and named
in a ``RuntimeWarning``. So a command whose tree is to be killed must run in a
process group of its own: ``start_new_session=True`` or ``process_group=0``.

``run_process`` is ``subprocess.run(capture_output=True)`` with a deadline that
the Rust timer thread enforces by killing the whole tree without the GIL, and a
reader that returns on time even when orphaned grandchildren keep the pipes open.

Linux only (it reads ``/proc``).
"""

from __future__ import annotations

import codecs
import contextlib
import locale
import operator
import os
import select
import selectors
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, SupportsIndex, Union

from taut import _core
from taut._checks import check_duration, check_timeout, describe, earliest, is_bool
from taut.deadline import DeadlineExpired, remaining

__all__ = ["ProcessResult", "kill_process_tree", "run_process"]

# After the deadline has killed the tree (and whoever else held our pipes' write
# ends), how long to keep reading output that is already in the pipes. A holder
# neither kill could reach (another user's process) keeps the write end open;
# past this we close our end.
_DRAIN_AFTER_KILL_S = 0.2
# How long to wait for the killed root to be reaped before returning without it.
_REAP_AFTER_KILL_S = 1.0
# How long to wait, once the deadline fired, for its kill (a Rust thread that
# scans /proc and freezes the tree, milliseconds as a rule) to report what it
# found. Past this the outcome is a timeout, as it may well be one.
_KILL_REPORT_WAIT_S = 5.0
# Granularity of the grace wait in kill_process_tree.
_GRACE_SLICE_S = 0.01
# The job-control stops, which a handler may catch and an orphaned process
# group never obeys; kill_process_tree stops a tree with SIGSTOP for them.
_JOB_CONTROL_STOPS = frozenset({signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU})
# Signals that can never end a process (with grace, refused).
_NEVER_ENDS = frozenset({signal.SIGSTOP, signal.SIGCONT})

_StrOrBytesPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


# pid_t is a 32-bit int on Linux: a larger pid names no process and would
# overflow on its way to the kernel.
_PID_MAX = 2**31 - 1


def _describe(value: object) -> str:
    # describe(): a __repr__ that raises is the wrong value's, not the
    # caller's error (repr() alone let it out in place of the TypeError).
    # 40 characters: 10**400 is a legal input; its 401 digits are not a
    # useful message.
    return describe(value, 40)


def _as_int(value: object) -> int | None:
    """``value`` as an int if it is one, or stands for one (``__index__``: a
    NumPy integer); None for anything else, bools included (True is no pid)."""
    if is_bool(value):
        return None
    if isinstance(value, int):
        return int(value)
    if not isinstance(value, SupportsIndex):
        return None
    try:
        return operator.index(value)
    except Exception:  # an __index__ that refuses (NumPy's bool_ does)
        return None


def _check_pid(value: object) -> int:
    pid = _as_int(value)
    if pid is None:
        raise TypeError(f"pid must be a positive int process id, got {_describe(value)}")
    if not 0 < pid <= _PID_MAX:
        raise ValueError(
            f"pid must be a positive int process id up to {_PID_MAX}, got {_describe(pid)}"
        )
    if pid == 1:
        raise ValueError("pid must not be 1: refusing to signal init and every process")
    # The caller, its ancestors and its process group are refused by the core,
    # which decides from /proc at the moment of the call.
    return pid


def _refuse_thread_id(pid: int) -> None:
    """``/proc/TID`` exists for every thread too, so the id of a thread that is
    not its process's main thread looks like a process, one that can never be
    signalled as such (no pidfd opens for it): refused, naming its process."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            tgid = next((int(line.split()[1]) for line in status if line.startswith(b"Tgid:")), pid)
    except (OSError, ValueError, IndexError):
        return  # gone, or unreadable: the core decides
    if tgid != pid:
        raise ValueError(f"pid must be a process id, got {pid}: a thread of process {tgid}")


def _check_signal(value: object) -> int:
    sig = _as_int(value)
    if sig is None:
        raise TypeError(
            f"sig must be a signal number (int or signal.Signals), got {_describe(value)}"
        )
    if sig not in signal.valid_signals() or sig == 0:
        raise ValueError(
            f"sig must be a valid signal number other than 0, got {_describe(value)}"
        )
    return sig


def _check_grace(grace: object) -> float | None:
    return check_duration(grace, "grace")


def kill_process_tree(pid: int, *, sig: int = signal.SIGKILL, grace: float | None = None) -> bool:
    """Signal the process ``pid`` and all its descendants; ``False`` if ``pid`` is gone.

    The tree is frozen (``SIGSTOP``) and rescanned until no new member appears,
    then ``sig`` is sent to every member, then ``SIGCONT`` unless ``sig`` is
    ``SIGKILL`` or ``SIGSTOP``, so a ``SIGTERM`` can be handled. A job-control stop
    (``SIGTSTP``, ``SIGTTIN``, ``SIGTTOU``) stops the whole tree as ``SIGSTOP``
    does (sent as such, the ``SIGCONT`` would drop it, and a tree in a session
    of its own would not obey it): a handler of it does not run, and ignoring
    it does not keep a process running. ``sig=signal.SIGCONT`` continues the
    tree. With ``grace`` (seconds), the
    first signal is ``SIGTERM`` (or ``sig`` if another one than ``SIGKILL`` was
    given), and after ``grace`` seconds ``SIGKILL`` goes to every member still
    running and to anything it started meanwhile (a stop signal or ``SIGCONT``
    with ``grace`` is a ``ValueError``: the tree could only be killed at the
    end of the wait). A zombie (exited, not yet
    reaped) still counts as present, as for ``os.kill``. Runs without the GIL.
    An exception (``KeyboardInterrupt``) during the grace wait sends the
    ``SIGKILL`` at once before it propagates.

    The caller, its ancestors and the members of its own process group are never
    stopped nor signalled. If ``pid`` is one of them this raises ``ValueError``
    (so a child started without ``start_new_session=True`` or
    ``process_group=0`` cannot be killed with this function: it shares the
    caller's group). If the tree reaches one of them, it is left alone (an
    ancestor's other children with it; a group member's own descendants are still
    killed) and a ``RuntimeWarning`` names the pids.

    ``pid`` and ``sig`` may be any int-like (a NumPy integer, anything with
    ``__index__``) but a bool. ``TypeError``/``ValueError`` name the parameter
    and the value for a ``pid`` that is not an int in ``1..2**31-1`` (also
    ``2**63`` or ``10**400``) or is
    the id of a thread other than its process's main thread, a bad ``sig`` or
    ``grace``. OS failures raise the ``OSError`` subclass of their
    errno: ``PermissionError`` when no member could be signalled because they
    belong to another user, as ``os.kill`` would.
    """
    pid = _check_pid(pid)
    sig = _check_signal(sig)
    grace_s = _check_grace(grace)
    if grace_s is not None and (sig in _JOB_CONTROL_STOPS or sig in _NEVER_ENDS):
        # The grace period waits for the tree to end: one stopped or
        # continued never does, and would be killed at the end of it.
        raise ValueError(
            f"grace needs a signal that asks processes to end, got sig="
            f"{signal.Signals(sig).name} with grace={_describe(grace)}: it stops or continues "
            "them, so they would all be killed after the grace period"
        )
    if sig in _JOB_CONTROL_STOPS:
        # Sent as such they would stop nothing: the SIGCONT that ends the
        # freeze drops a stop signal still pending, and in a group with no
        # parent outside it (a session of its own) the kernel drops them
        # even from os.kill. SIGSTOP stops every member, and the tree stays
        # frozen, whole.
        sig = signal.SIGSTOP
    _refuse_thread_id(pid)
    if grace_s is None:
        outcome = _core.signal_process_tree(pid, sig)
        if outcome is None:
            return False
        _warn_skipped(pid, outcome[1])
        return True
    first = signal.SIGTERM if sig == signal.SIGKILL else sig
    # Read first, so that the SIGKILL below can name the root even if an
    # interrupt lands as soon as the first signal is out (before its outcome
    # is even stored).
    root = _core.process_start_time(pid)
    if root is None:
        return False
    running = [(pid, root)]
    try:
        outcome = _core.signal_process_tree(pid, first, root)
        if outcome is None:
            return False
        members, skipped = outcome
        until = time.monotonic() + grace_s
        running = _core.running_processes(members)
        while running:
            left = until - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(_GRACE_SLICE_S, left))
            running = _core.running_processes(running)
    except BaseException:
        # Interrupted (Ctrl-C) after the first signal: the caller gives up
        # waiting, not killing. Without the SIGKILL now, whatever ignores
        # SIGTERM would live on. (Protected roots are skipped; should the
        # first signal itself have failed, its error is what propagates.)
        with contextlib.suppress(OSError):
            _core.signal_process_trees(running, signal.SIGKILL)
        raise
    if running:
        skipped = skipped + _core.signal_process_trees(running, signal.SIGKILL)[1]
    _warn_skipped(pid, skipped)
    return True


def _warn_skipped(pid: int, skipped: list[tuple[int, int]]) -> None:
    if skipped:
        pids = sorted({p for p, _ in skipped})
        warnings.warn(
            f"kill_process_tree({pid}) left {len(pids)} process(es) of the tree alone: "
            f"the caller, its ancestors or members of its process group, pids {pids}",
            RuntimeWarning,
            stacklevel=3,
        )


class ProcessResult(subprocess.CompletedProcess):  # type: ignore[type-arg]
    """The outcome of ``run_process``: a ``subprocess.CompletedProcess`` that also
    says whether the deadline's kill found the command still running
    (``timed_out``), how long the call took (``elapsed_s``) and the budget it had
    (``timeout_s``). When timed out, ``stdout``/``stderr`` hold what was read
    before the kill (as text, bytes that do not decode, such as a character
    the kill cut short, are U+FFFD) and ``returncode`` is the root's: ``-9`` if the kill ended
    it, its own exit status if it had exited while a process holding its pipes
    kept the call waiting, ``None`` if it could not be reaped in time."""

    def __init__(
        self,
        args: Any,
        returncode: int | None,
        stdout: Any = None,
        stderr: Any = None,
        *,
        timed_out: bool = False,
        elapsed_s: float = 0.0,
        timeout_s: float | None = None,
    ) -> None:
        super().__init__(args, returncode, stdout, stderr)  # type: ignore[arg-type]
        self.timed_out = timed_out
        self.elapsed_s = elapsed_s
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, timed_out={self.timed_out!r})"

    def check_returncode(self) -> None:
        """Raise ``DeadlineExpired`` if timed out, ``CalledProcessError`` on a
        non-zero exit status."""
        if self.timed_out:
            raise DeadlineExpired(
                label=_label(self.args),
                timeout_s=self.timeout_s if self.timeout_s is not None else 0.0,
                elapsed_s=self.elapsed_s,
            )
        super().check_returncode()


def _label(args: Any) -> str:
    if isinstance(args, (str, bytes, os.PathLike)):
        return os.fsdecode(args)
    try:
        return " ".join(os.fsdecode(a) for a in args)
    except TypeError:
        return repr(args)


def _decode(data: bytes, encoding: str | None, errors: str | None, *, cut: bool) -> str:
    """``data`` as text. ``cut``: the deadline's kill ended the output, a
    part of it, maybe cut inside a character. The timeout is then the
    outcome, never a decode error (``subprocess.run`` hands such output over
    undecoded in ``TimeoutExpired``): what does not decode as asked becomes
    U+FFFD."""
    codec = encoding or locale.getpreferredencoding(False)
    try:
        text = data.decode(codec, errors or "strict")
    except UnicodeDecodeError:
        if not cut:
            raise
        text = data.decode(codec, "replace")
    # Universal newlines, as text-mode pipes of subprocess.run deliver them.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


def run_process(
    args: _StrOrBytesPath | Sequence[_StrOrBytesPath],
    timeout: float | None,
    *,
    input: bytes | str | None = None,
    check: bool = False,
    **popen_kwargs: Any,
) -> ProcessResult:
    """Run a command like ``subprocess.run(args, capture_output=True, ...)``, bounded.

    At the deadline the Rust timer thread kills the command's whole process tree
    (``SIGKILL``, see ``kill_process_tree``) without needing the GIL, and the call
    returns promptly with ``timed_out=True``, even if orphaned grandchildren hold
    the output pipes; whoever still holds them then (a double-forked daemon that
    no parent link, group or session leads back to) is killed with its tree too.
    ``timed_out`` is what that kill found: the root not yet exited, or a process
    holding a pipe the call was still waiting on. A command that had ended by
    itself is not timed out, even when this thread (held off the GIL) first
    sees its end after the deadline fired.
    A daemon that closed the pipes cannot be told from an unrelated process and
    survives. ``timeout`` goes through ``clamp_timeout``: ``None`` waits
    forever, ``0`` or less returns timed out without starting anything.
    Inside deadline scopes (``taut.fail_after`` and the like) the earliest of
    ``timeout`` and the scopes' deadlines applies (``timeout_s`` says which
    budget that left), on any thread and with or without ``interrupt``.

    The child starts in a new session (``start_new_session=True``) unless
    ``start_new_session`` or ``process_group`` is passed, so grandchildren that
    outlive their parent are still found by session. Keeping it in the caller's
    process group (``start_new_session=False`` without another
    ``process_group``) is a ``ValueError``: the caller's group is never killed.
    ``stdout``/``stderr`` default to pipes and may be overridden (a bad
    stream or a non-bool flag is refused before anything starts, naming it);
    ``text``/``encoding``/``errors`` decode the output; ``check=True`` raises
    ``CalledProcessError`` on a non-zero exit and ``DeadlineExpired`` on timeout.
    On any exception in the caller (such as ``KeyboardInterrupt``) the tree is
    killed before the exception propagates.
    """
    budget = check_timeout(timeout)
    if not isinstance(args, (str, bytes, os.PathLike)):
        # Any iterable of arguments, read once here: a generator would reach
        # Popen's empty-command failure below unchecked.
        try:
            args = list(args)
        except TypeError:
            raise TypeError(
                "args must be a command string or a sequence of arguments, got "
                f"{_describe(args)}"
            ) from None
    if isinstance(args, (str, bytes, list)) and len(args) == 0:
        # Popen would fail deep inside: IndexError: list index out of range.
        raise ValueError(f"args must name a command, got {_describe(args)}")
    if not isinstance(check, bool):
        raise TypeError(f"check must be a bool, got {_describe(check)}")
    for forbidden in ("capture_output", "timeout"):
        if forbidden in popen_kwargs:
            raise TypeError(f"run_process() does not take {forbidden}= (it always captures)")
    _check_popen_arguments(popen_kwargs)
    encoding = _check_codec_name(popen_kwargs.pop("encoding", None), "encoding")
    errors = _check_codec_name(popen_kwargs.pop("errors", None), "errors")
    # Both popped: the decoding is ours, Popen's pipes stay binary.
    text = popen_kwargs.pop("text", None)
    universal_newlines = popen_kwargs.pop("universal_newlines", None)
    if text is not None and universal_newlines is not None and bool(text) != bool(
        universal_newlines
    ):
        # subprocess.run's exception and words.
        raise subprocess.SubprocessError(
            "Cannot disambiguate when both text and universal_newlines are supplied but "
            f"different, got text={text!r}, universal_newlines={universal_newlines!r}"
        )
    text_mode = bool(text or universal_newlines or encoding or errors)
    input_bytes: bytes | None = None
    if input is not None:
        if "stdin" in popen_kwargs:
            raise ValueError("stdin and input arguments may not both be used")
        if isinstance(input, str):
            if not text_mode:
                raise TypeError("input must be bytes unless text, encoding or errors is given")
            input_bytes = input.encode(
                encoding or locale.getpreferredencoding(False), errors or "strict"
            )
        else:
            # memoryview, not bytes(): bytes(5) would be five NUL bytes and
            # bytes(10**12) a terabyte; only bytes-like data is input.
            try:
                input_bytes = bytes(memoryview(input))
            except TypeError:
                raise TypeError(
                    "input must be bytes (or str with text, encoding or errors), "
                    f"got {_describe(input)}"
                ) from None
        popen_kwargs["stdin"] = subprocess.PIPE
    popen_kwargs.setdefault("stdout", subprocess.PIPE)
    popen_kwargs.setdefault("stderr", subprocess.PIPE)
    _own_group_for_the_tree(popen_kwargs)

    # An enclosing deadline scope bounds the command too, as trio's cancel
    # scopes bound its run_process: off the main thread no scope can
    # interrupt the wait for the command, and without interrupt=True a scope
    # acts only at its exit, after the command ended by itself (never, for
    # one that does not end).
    budget = earliest(budget, remaining())
    started = time.monotonic()
    if budget is not None and budget <= 0:
        return ProcessResult(args, None, None, None, timed_out=True, timeout_s=budget)
    proc = subprocess.Popen(args, **popen_kwargs)
    deadline: _core.Deadline | None = None
    start_time: int | None = None
    timed_out = False
    # Everything after the spawn is inside the try: an interrupt landing
    # anywhere here still kills the command's tree.
    try:
        start_time = _core.process_start_time(proc.pid)
        kill = None
        if budget is not None:
            # Armed only once the command exists (a spawn that failed left a
            # deadline pending on the timer until it would have fired), at the
            # time measured before the spawn. From now on the timer thread
            # owns the kill. It also notes whether it found the command still
            # running (the root, or a member holding one of these pipes).
            deadline = _core.Deadline(started + budget)
            pipes = [s.fileno() for s in (proc.stdin, proc.stdout, proc.stderr) if s is not None]
            kill = _core.signal_process_tree_at(
                deadline, proc.pid, signal.SIGKILL, start_time, pipes
            )
        outputs, timed_out = _communicate(proc, deadline, kill, input_bytes, start_time)
    except BaseException:
        if deadline is not None:
            deadline.cancel()
        _core.signal_process_tree(proc.pid, signal.SIGKILL, start_time)
        _close_pipes(proc)
        _reap(proc, _REAP_AFTER_KILL_S)
        raise
    if deadline is not None and not timed_out:
        deadline.cancel()
    if timed_out:
        returncode = _reap(proc, _REAP_AFTER_KILL_S)
    else:
        returncode = proc.wait()
    out, err = outputs
    stdout: bytes | str | None = out
    stderr: bytes | str | None = err
    if text_mode:
        stdout = None if out is None else _decode(out, encoding, errors, cut=timed_out)
        stderr = None if err is None else _decode(err, encoding, errors, cut=timed_out)
    result = ProcessResult(
        args,
        returncode,
        stdout,
        stderr,
        timed_out=timed_out,
        elapsed_s=time.monotonic() - started,
        timeout_s=budget,
    )
    if check:
        result.check_returncode()
    return result


def _check_codec_name(value: object, name: str) -> str | None:
    """``encoding``/``errors`` are first used to decode the output, after the
    command ran: checked now, so a bad one costs no run and loses no output."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, got {_describe(value)}")
    kind = "a codec" if name == "encoding" else "an error handler"
    try:
        if name == "encoding":
            codecs.lookup(value)
        else:
            codecs.lookup_error(value)
    except LookupError:
        # LookupError, as subprocess.run raises for an unknown encoding.
        raise LookupError(f"{name} must name {kind}, got {_describe(value)}") from None
    return value


# Popen's flags that take a bool, and whether None means "unset" for them.
# Popen takes any truthy value for most of them (text="no" would turn text
# mode on, close_fds=None off), and fails deep inside on others
# (start_new_session="yes": "'str' object cannot be interpreted as an integer").
_BOOL_FLAGS = {
    "start_new_session": True,
    "text": True,
    "universal_newlines": True,
    "shell": False,
    "close_fds": False,
}


def _check_popen_arguments(popen_kwargs: dict[str, Any]) -> None:
    """The session and stream arguments, checked before anything starts, with
    errors that name them: Popen's own are an ``AttributeError`` about
    ``fileno``, an ``OverflowError``, or none at all (``stdout=True`` is fd 1)."""
    for name, none_ok in _BOOL_FLAGS.items():
        if name not in popen_kwargs:
            continue
        value = popen_kwargs[name]
        if not isinstance(value, bool) and not (none_ok and value is None):
            kinds = "a bool or None" if none_ok else "a bool"
            raise TypeError(f"{name} must be {kinds}, got {_describe(value)}")
    for name in ("stdin", "stdout", "stderr"):
        if name in popen_kwargs:
            popen_kwargs[name] = _check_stream(name, popen_kwargs[name])


def _check_stream(name: str, value: object) -> object:
    """``value`` as Popen takes it: a file descriptor as a plain int (Popen
    takes a NumPy integer for a file object)."""
    special = {subprocess.PIPE: "subprocess.PIPE", subprocess.DEVNULL: "subprocess.DEVNULL"}
    if name == "stderr":
        special[subprocess.STDOUT] = "subprocess.STDOUT"
    kinds = f"None, {', '.join(special.values())}, a file descriptor or a file object"
    if value is None:
        return None
    fd = _as_int(value)
    if fd is not None and fd in special:
        return fd
    if fd is None:
        fileno = None if isinstance(value, bool) else getattr(value, "fileno", None)
        try:
            fd = _as_int(fileno()) if callable(fileno) else None
        except (OSError, ValueError):  # io.StringIO, a closed file
            fd = None
        if fd is None:
            raise TypeError(f"{name} must be {kinds} with a fileno(), got {_describe(value)}")
    else:
        value = fd
    if not 0 <= fd <= _PID_MAX:  # file descriptors are C ints too
        raise ValueError(f"{name} must be {kinds}, got {_describe(value)}")
    try:
        os.fstat(fd)
    except OSError as exc:
        raise ValueError(
            f"{name} must be {kinds}, got {_describe(value)}: not an open file "
            f"descriptor ({exc.strerror})"
        ) from None
    return value


def _own_group_for_the_tree(popen_kwargs: dict[str, Any]) -> None:
    """The deadline kills the command's tree, which must never touch the caller's
    process group: the command gets a session of its own unless it is asked for
    a group of its own, and a request to keep it in the caller's group is refused."""
    new_session = popen_kwargs.get("start_new_session")
    given = popen_kwargs.get("process_group")
    group = None if given is None else _as_int(given)
    if given is not None:
        # Checked before anything starts: Popen ignores a negative group (the
        # command would stay in the caller's, found only after it started)
        # and fails deep inside on one too large for a pid.
        if group is None:
            raise TypeError(f"process_group must be an int or None, got {_describe(given)}")
        popen_kwargs["process_group"] = group  # a plain int for Popen
        if not 0 <= group <= _PID_MAX:
            raise ValueError(
                f"process_group must be 0 (a group of its own) or an existing group's "
                f"id, at most {_PID_MAX}, got {group!r}"
            )
    if new_session is None and group is None:
        popen_kwargs["start_new_session"] = True
    elif not new_session and (group is None or group == os.getpgrp()):
        raise ValueError(
            "run_process needs the command in a process group of its own (its tree is "
            "killed at the deadline, and the caller's own group never is): leave "
            "start_new_session unset or True, or pass process_group=0; got "
            f"start_new_session={new_session!r}, process_group={group!r}"
        )


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def _reap(proc: subprocess.Popen[bytes], wait_s: float) -> int | None:
    try:
        return proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        # Popen's finaliser puts it on the list that subprocess reaps later.
        return None


def _communicate(
    proc: subprocess.Popen[bytes],
    deadline: _core.Deadline | None,
    kill: _core.TreeKill | None,
    input_bytes: bytes | None,
    start_time: int | None,
) -> tuple[tuple[bytes | None, bytes | None], bool]:
    """Feed stdin, read stdout/stderr, until the root has exited and the pipes are
    at EOF, or the deadline expires. Sleeps in ``select`` without a timeout: the
    pipes, a pidfd of the root and the deadline's wake-up pipe all wake it.

    Timed out means: the deadline fired while the call was still waiting on the
    command, as its kill (``kill``) found it, or on a process outside the tree
    that still holds the pipes. Whether this thread saw the end before or
    after the deadline fired does not matter (it may get the GIL back late)."""
    out_fd = proc.stdout.fileno() if proc.stdout is not None else None
    err_fd = proc.stderr.fileno() if proc.stderr is not None else None
    chunks: dict[int, list[bytes]] = {}
    sel = selectors.DefaultSelector()
    wake_r = wake_w = -1
    pidfd = _pidfd(proc.pid)
    timed_out = False
    try:
        for fd in (out_fd, err_fd):
            if fd is not None:
                chunks[fd] = []
                sel.register(fd, selectors.EVENT_READ)
        reading = set(chunks)
        stdin_fd = -1
        if proc.stdin is not None:
            if input_bytes:
                stdin_fd = proc.stdin.fileno()
                os.set_blocking(stdin_fd, False)
                sel.register(stdin_fd, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        if deadline is not None:
            wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            sel.register(wake_r, selectors.EVENT_READ)
            deadline.notify_fd(wake_w)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ)
        exited = False
        view = memoryview(input_bytes or b"")
        offset = 0
        while reading or stdin_fd >= 0 or not exited:
            if deadline is not None and deadline.expired:
                break
            # Without a pidfd the exit is noticed by polling, in short slices.
            events = sel.select(None if pidfd is not None else 0.05)
            if pidfd is None and not exited and proc.poll() is not None:
                exited = True
            for key, _ in events:
                fd = key.fd
                if fd == wake_r:
                    _drain(wake_r)
                elif fd == pidfd:
                    exited = True
                    sel.unregister(fd)
                elif fd == stdin_fd:
                    try:
                        offset += os.write(fd, view[offset : offset + select.PIPE_BUF])
                    except BlockingIOError:
                        pass
                    except BrokenPipeError:
                        offset = len(view)
                    if offset >= len(view):
                        sel.unregister(fd)
                        stdin_fd = -1
                        if proc.stdin is not None:
                            proc.stdin.close()
                elif _read_into(fd, chunks):
                    sel.unregister(fd)
                    reading.discard(fd)
        # Also when the loop ended by itself: the deadline may have fired
        # before this thread got on with the end (a busy GIL), and then the
        # end may be the kill's doing, or not. The kill knows.
        if deadline is not None and deadline.expired:
            timed_out = _killed_while_running(kill)
            if timed_out:
                # The timer thread's kill is done; make sure nothing it could
                # not freeze in time lives on.
                _core.signal_process_tree(proc.pid, signal.SIGKILL, start_time)
            # Our ends still open, with the access we have to them.
            still_open = dict.fromkeys(reading, os.O_RDONLY)
            if stdin_fd >= 0:
                still_open[stdin_fd] = os.O_WRONLY
            if still_open:
                # A process the tree kill did not reach holds our pipes: a daemon
                # that left the tree (forked twice, the middle process gone, then
                # setsid: no parent link, group or session leads to it). Holding
                # them makes it part of this command's output, and the call was
                # waiting on it at the deadline: kill it, and its own tree, too.
                holders = _pipe_peers(still_open)
                if holders:
                    timed_out = True
                    _core.signal_process_trees(holders, signal.SIGKILL)
            # Read what is left, never waiting on EOF for longer than a moment.
            until = time.monotonic() + _DRAIN_AFTER_KILL_S
            while reading:
                left = until - time.monotonic()
                if left <= 0:
                    # Something we cannot see (another user's process) still
                    # holds a pipe: the call was waiting on it.
                    timed_out = True
                    break
                for key, _ in sel.select(left):
                    if key.fd in reading and _read_into(key.fd, chunks):
                        sel.unregister(key.fd)
                        reading.discard(key.fd)
                    elif key.fd == wake_r:
                        _drain(wake_r)
    finally:
        if deadline is not None:
            # Before wake_w closes: once cancel() returns the timer thread
            # writes to it no more, even if the deadline has just fired (a
            # late byte would land in whatever reuses the fd number next).
            # The kill it owns is unaffected: a fired deadline has run it,
            # and the caller cancels a deadline that has not anyway.
            deadline.cancel()
        sel.close()
        for fd in (wake_r, wake_w, pidfd):
            if fd is not None and fd >= 0:
                os.close(fd)
        _close_pipes(proc)
    out = None if out_fd is None else b"".join(chunks[out_fd])
    err = None if err_fd is None else b"".join(chunks[err_fd])
    return (out, err), timed_out


def _killed_while_running(kill: _core.TreeKill | None) -> bool:
    """Whether the deadline's kill, which has fired, found the command still
    running: its root not yet exited, or a member of its tree holding our
    pipes. The kill runs on a thread of its own; wait for its report. A kill
    that did not report (failed, or too slow) counts as having found it."""
    if kill is None or not kill.wait(_KILL_REPORT_WAIT_S):
        return True
    return kill.found_running is not False


def _pipe_peers(ends: dict[int, int]) -> list[tuple[int, int]]:
    """The other processes holding the other end of the pipes whose ends we
    hold (``ends``: our fd and its access mode, ``O_RDONLY`` or ``O_WRONLY``),
    as ``(pid, start_time)``, found through ``/proc``: writers of our output
    pipes, readers of our stdin. Only called at a deadline that left a pipe
    open; processes whose ``/proc`` entries we may not read are missed (they
    are not ours to kill)."""
    ours = {f"pipe:[{os.fstat(fd).st_ino}]": mode for fd, mode in ends.items()}
    me = os.getpid()
    found: list[tuple[int, int]] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        # Read before its descriptors: should the pid be reused meanwhile,
        # this start time names the process whose descriptors these were,
        # and the kill misses the newcomer instead of taking it for them.
        start = _core.process_start_time(int(name))
        if start is None:
            continue
        for base in _fd_tables(f"/proc/{name}"):
            holds, whole = _holds_other_end(base, ours)
            if holds:
                found.append((int(name), start))
            if holds or whole:
                break
    return found


def _fd_tables(process: str) -> Iterator[str]:
    """Where the descriptors of the process at ``process`` (``/proc/PID``) can
    be read: ``process`` itself, then each of its threads
    (``process/task/TID``), for the caller to read until one is read whole.

    ``/proc/PID/fd`` is the main thread's table: empty once that thread has
    ended while others run on (the process then shows ``Z``), though the table
    they share, our pipes in it, lives on; and a thread that ends while its
    table is read leaves a table read in part (its links fail from then on)."""
    yield process
    try:
        tasks = os.listdir(f"{process}/task")
    except OSError:
        return
    for tid in tasks:
        yield f"{process}/task/{tid}"


def _holds_other_end(base: str, ours: dict[str, int]) -> tuple[bool, bool]:
    """Whether the descriptor table at ``base`` (``/proc/PID`` or
    ``/proc/PID/task/TID``) holds one of our pipes (``ours``: its link and our
    end's access mode) with the other access mode, and whether the table was
    read whole: it listed a descriptor and none failed to read (or need not
    be read elsewhere: we may not read it, and its threads' tables are no
    more ours to read). Its ``fdinfo`` is read from the same place as its
    ``fd``."""
    try:
        fds = os.listdir(f"{base}/fd")
    except PermissionError:
        return False, True  # another user's process: not ours to kill
    except OSError:
        return False, False
    whole = bool(fds)
    for fd in fds:
        try:
            link = os.readlink(f"{base}/fd/{fd}")
            if link not in ours:
                continue
            with open(f"{base}/fdinfo/{fd}", "rb") as info:
                flags = next(
                    (int(line.split()[1], 8) for line in info if line.startswith(b"flags:")),
                    None,
                )
        except OSError:
            whole = False
            continue
        except (ValueError, IndexError):
            continue
        if flags is not None and flags & os.O_ACCMODE != ours[link]:
            return True, True
    return False, whole


def _read_into(fd: int, chunks: dict[int, list[bytes]]) -> bool:
    """Read what is there; True at EOF."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return False
    if not data:
        return True
    chunks[fd].append(data)
    return False


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
