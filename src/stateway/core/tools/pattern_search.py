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

Compiling is no safer: the package writes a repeat's minimum count out in full, so
``a{4294967294}`` (13 characters) asks for gigabytes, on the event loop.
:func:`compile_pattern` first bounds the copies its repeats could make (:func:`copies`),
and keeps the pattern out of the package's cache (500 of them, distinct patterns each
the model's, would stay in memory).
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
MAX_COPIES: Final = 1_000
"""The most copies of its parts a pattern's repeats may make (:func:`copies`): at most
about a megabyte compiled, where an honest pattern (``\\d{4}-\\d{2}``) makes tens."""

_pool: ThreadPoolExecutor | None = None
"""The matching threads, made by the first search: one pool per process, shared by every
gateway it holds, on purpose: the cores slow patterns may take are the process's (two apps
with a pool each would take twice :data:`WORKERS`). It keeps nothing of any of them: each
match carries its pattern and texts, and answers the event loop that asked."""


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """``pattern`` compiled as matching compiles it; raises ``regex.error`` (and
    ``RecursionError``, ``OverflowError``) for one that is not valid, or whose repeats
    make more than :data:`MAX_COPIES` copies."""
    if copies(pattern) > MAX_COPIES:
        raise regex.error(
            f"its repeat counts make more than {MAX_COPIES} copies of what they repeat"
        )
    return regex.compile(pattern, cache_pattern=False)


def copies(pattern: str) -> int:
    """At least the copies of its parts ``pattern`` compiles to, read without parsing it:
    each character counts the product of the minimum counts (``{n}``, ``{n,}``,
    ``{n,m}``) of all the repeats after it, as any repeat of it comes after it. Each
    ``{`` is read as a repeat's where it could be one, with a verbose pattern's spaces
    and comments; every character counts, a count's too (``{1 1}`` is text unless the
    pattern is verbose): a repeat cannot be hidden, at the cost of overcounting
    (``a{99}b{99}``).
    """
    minimums = [  # (where a count's "{" is, its minimum), in the pattern's order
        (start, count)
        for start in range(len(pattern))
        if pattern[start] == "{" and (count := _count(pattern, start + 1)) is not None
    ]
    total = 0
    product = 1  # of the counts after the characters being counted
    cursor = len(pattern)
    for start, minimum in reversed(minimums):
        total += (cursor - start) * product
        cursor = start
        product = min(product * max(minimum, 1), MAX_COPIES + 1)
    return total + cursor * product


def _count(pattern: str, at: int) -> int | None:
    """The minimum of the repeat count beginning at ``at`` (after its ``{``), skipping
    spaces and ``#`` comments as a verbose pattern would; None if none is."""
    digits = ""
    seen_comma = False
    while at < len(pattern):
        char = pattern[at]
        if char.isspace():
            at += 1
        elif char == "#":
            newline = pattern.find("\n", at)
            at = len(pattern) if newline < 0 else newline
        elif char in "0123456789":
            if not seen_comma:
                digits += char
            at += 1
        elif char == "," and not seen_comma:
            seen_comma = True
            at += 1
        elif char == "}":
            if not digits and not seen_comma:
                return None
            return int(digits or 0)
        else:
            return None
    return None


async def matching(
    pattern: regex.Pattern[str],
    texts: list[tuple[str, str]],
    limit: int,
    time_limit: float = TIME_LIMIT,
) -> list[int]:
    """The indexes of ``texts`` (a name, the rest) that ``pattern`` (:func:`compile_pattern`)
    finds: those whose name it finds first, then the others, at most ``limit`` of each.
    ``time_limit`` counts from now: a search waiting for a thread (slow patterns of
    others' in both) spends it waiting, so a flood of slow patterns fails searches
    rather than queueing them without end."""
    deadline = time.monotonic() + time_limit
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="tool-search-pattern")
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(_pool, _match, pattern, texts, limit, deadline)
    except TimeoutError:
        raise ToolFailure(
            ToolError(
                f"The pattern took longer than {time_limit:g} s to match; write a simpler one.",
                cause=EXECUTION_TIME_EXCEEDED,
            )
        ) from None


def _match(
    compiled: regex.Pattern[str], texts: list[tuple[str, str]], limit: int, deadline: float
) -> list[int]:
    """Run in a worker thread; raises ``TimeoutError`` once ``deadline`` (monotonic) is
    past."""
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
