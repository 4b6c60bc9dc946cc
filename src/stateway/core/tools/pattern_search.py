"""A regular expression matched against the deferred tools' text in a child process,
killed past :data:`TIME_LIMIT`.

The model writes the pattern and the client the text, and Python's backtracking engine
takes exponential time on some pairs (``(a+)+$`` against 30 ``a`` and a ``!``) while it
holds the GIL: matched in the gateway's process, one such search would stall every
request the process serves, a thread being no help. A child process (the interpreter
running the gateway, isolated: ``-I -S``, ~20 ms to start) is matched in instead; one
running past the limit is killed, and the search fails with
``execution_time_exceeded``, as Anthropic's does.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Final

import orjson

from stateway.core.tools.ports import ToolError, ToolFailure

TIME_LIMIT: Final = 5.0
"""Seconds a match may take, the child's start included."""
EXECUTION_TIME_EXCEEDED: Final = "execution_time_exceeded"
UNAVAILABLE: Final = "unavailable"
_MATCHER: Final = """
import json, re, sys
job = json.load(sys.stdin)
pattern = re.compile(job["pattern"])
names, rest = [], []
for index, (name, text) in enumerate(job["texts"]):
    if pattern.search(name):
        names.append(index)
        if len(names) >= job["limit"]:
            break
    elif len(rest) < job["limit"] and pattern.search(text):
        rest.append(index)
json.dump(names + rest, sys.stdout)
"""
"""Each text's index whose name matches, then those whose other text does, in order,
each list stopped at ``limit``."""


async def matching(
    pattern: str, texts: list[tuple[str, str]], limit: int, time_limit: float = TIME_LIMIT
) -> list[int]:
    """The indexes of ``texts`` (a name, the rest) that ``pattern`` (compiled already, so
    known to be valid) finds: those whose name it finds first, then the others, at most
    ``limit`` of each."""
    job = orjson.dumps({"pattern": pattern, "texts": texts, "limit": limit})
    try:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            "-c",
            _MATCHER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError as exc:
        raise _failure(UNAVAILABLE, f"The search could not run: {exc}.") from None
    try:
        out, _ = await asyncio.wait_for(child.communicate(job), time_limit)
    except TimeoutError:
        raise _failure(
            EXECUTION_TIME_EXCEEDED,
            f"The pattern took longer than {time_limit:g} s to match; write a simpler one.",
        ) from None
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    try:
        found = orjson.loads(out)
    except orjson.JSONDecodeError:
        found = None
    if child.returncode != 0 or not isinstance(found, list):
        raise _failure(UNAVAILABLE, "The search failed.")
    return [index for index in found if isinstance(index, int) and 0 <= index < len(texts)]


def _failure(cause: str, message: str) -> ToolFailure:
    return ToolFailure(ToolError(message, cause=cause))
