"""Units and the pinned request settings, in one place: every module and lesson reads them from here.

Sizes and bandwidths in the course are decimal (GB = 10⁹ bytes, as bandwidth is quoted); cache sizes are binary
(MiB = 2²⁰ bytes, as a CPU's caches are). PINNED is what every timed request sends so that repeats do the same work:
- temperature 0 and a fixed seed: the same tokens every time;
- cache_prompt false: every repeat prefills the whole prompt;
- ignore_eos: a model may not stop early, so n_predict tokens are always decoded.
"""

from __future__ import annotations

from typing import Any

KB = 1e3
MB = 1e6
GB = 1e9
KiB = 2**10
MiB = 2**20
GiB = 2**30

SEED = 42
# Read it, never write into it: `{**PINNED, "n_predict": 32}` makes a request of it.
PINNED: dict[str, Any] = {"temperature": 0, "seed": SEED, "cache_prompt": False, "ignore_eos": True}
