"""The runner hands the allocator's free pages back after each cell (isotax.run.memory): a
heap left full of holes by freed tool outputs shrinks when give_back() is called."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc
from isotax.run.memory import give_back

def rss_kib():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])

chunks = [bytes(3000) for _ in range(30000)]  # ~90 MB from malloc's heap
keep = chunks[::10]  # one in ten stays live, so the heap's top cannot simply be cut
del chunks
gc.collect()
before = rss_kib()
give_back()
print(before, rss_kib())
"""


def test_give_back_returns_the_holes_of_a_fragmented_heap() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    before, after = int(out[0]), int(out[1])
    assert before - after > 40_000, (before, after)  # most of the ~80 MB of holes
