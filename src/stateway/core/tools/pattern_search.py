"""A regular expression matched against the deferred tools' text, in a thread, given up
past :data:`TIME_LIMIT`.

The model writes the pattern and the client the text, and a backtracking engine takes
exponential time on some pairs (``(a|aa)+$`` against 60 ``a`` and a ``!``). The standard
library's ``re`` holds the GIL while it matches and cannot be stopped: one such search
would stall every request the process serves. The ``regex`` package (a superset of
``re``'s syntax) takes a ``timeout`` and, asked to (``concurrent``), lets go of the GIL
while it matches: the match runs in one of :data:`WORKERS` threads of its own (never the
event loop's default pool, which resolves host names), and one running past the limit
fails the search with ``execution_time_exceeded``, as Anthropic's does.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import regex

from stateway.core.tools.ports import ToolError, ToolFailure

TIME_LIMIT: Final = 2.0
"""Seconds the matches of one search may take in all (an honest pattern takes
microseconds per tool)."""
WORKERS: Final = 2
"""Threads matching at once: a search waits for one, so slow patterns use at most this
many cores, however many searches run."""
EXECUTION_TIME_EXCEEDED: Final = "execution_time_exceeded"

_pool: ThreadPoolExecutor | None = None


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """``pattern`` compiled as matching compiles it; raises ``regex.error`` (and
    ``RecursionError``, ``OverflowError``) for one that is not valid."""
    return regex.compile(pattern)


async def matching(
    pattern: str, texts: list[tuple[str, str]], limit: int, time_limit: float = TIME_LIMIT
) -> list[int]:
    """The indexes of ``texts`` (a name, the rest) that ``pattern`` (known to compile)
    finds: those whose name it finds first, then the others, at most ``limit`` of each."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="tool-search-pattern")
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(_pool, _match, pattern, texts, limit, time_limit)
    except TimeoutError:
        raise ToolFailure(
            ToolError(
                f"The pattern took longer than {time_limit:g} s to match; write a simpler one.",
                cause=EXECUTION_TIME_EXCEEDED,
            )
        ) from None


def _match(pattern: str, texts: list[tuple[str, str]], limit: int, time_limit: float) -> list[int]:
    """Run in a worker thread; raises ``TimeoutError`` once ``time_limit`` is spent."""
    compiled = compile_pattern(pattern)
    deadline = time.monotonic() + time_limit
    names: list[int] = []
    rest: list[int] = []
    for index, (name, text) in enumerate(texts):
        if _found(compiled, name, deadline):
            names.append(index)
            if len(names) >= limit:
                break
        elif len(rest) < limit and _found(compiled, text, deadline):
            rest.append(index)
    return names + rest


def _found(compiled: regex.Pattern[str], text: str, deadline: float) -> bool:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return compiled.search(text, timeout=left, concurrent=True) is not None
