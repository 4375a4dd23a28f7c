"""Settings shared by the whole test suite."""

from __future__ import annotations

import signal

from hypothesis import settings

# Hypothesis fails an example that takes longer than 200 ms by default: a
# timing assert, which a busy 2-core machine breaks now and then (seen:
# test_config's junk test at 454 ms). The tests' own bounds stay lopsided.
settings.register_profile("taut", deadline=None)
settings.load_profile("taut")

# A run started in the background by a shell without job control (`cmd &` in
# a script, nohup) inherits SIGINT ignored, and Python then installs no
# KeyboardInterrupt handler: the tests of Ctrl-C would fail for want of one.
# Installed here, the handler also reaches the interpreters the tests start
# (exec resets a handled signal to its default).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
