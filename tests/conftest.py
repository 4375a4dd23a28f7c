"""Settings shared by the whole test suite."""

from __future__ import annotations

from hypothesis import settings

# Hypothesis fails an example that takes longer than 200 ms by default: a
# timing assert, which a busy 2-core machine breaks now and then (seen:
# test_config's junk test at 454 ms). The tests' own bounds stay lopsided.
settings.register_profile("taut", deadline=None)
settings.load_profile("taut")
