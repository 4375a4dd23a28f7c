"""A quick check that an installed taut wheel works on this interpreter."""

import concurrent.futures as cf
import sys

import taut

with taut.ThreadPoolExecutor(4) as ex:
    futures = [ex.submit(pow, 2, i) for i in range(1000)]
    assert [f.result() for f in cf.as_completed(futures)] and futures[10].result() == 1024
    assert list(ex.map(abs, range(-5, 0))) == [5, 4, 3, 2, 1]
print(f"ok: taut {taut.__version__} on Python {sys.version.split()[0]}")
