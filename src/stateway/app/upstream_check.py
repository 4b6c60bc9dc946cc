"""Once at start-up, ask each upstream for its models (``GET {url}/models``), so that an
operator sees a wrong upstream URL, or a model server that is not up yet, in the log as the
gateway starts rather than in the first client's error. It only warns: start-up goes on
(a model server still loading its weights answers later), and it runs beside serving.

A 404 is the usual sign of a URL without its API's base path (``http://gpu:8000`` for
vLLM's ``http://gpu:8000/v1``; LM Studio answers one with a 200 that is only its words,
read as the 404 it means): every request would then be refused as ``model_not_found``,
which says nothing about the URL, so the warning says it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from stateway.core.backend import Backend
from stateway.core.errors import GatewayError
from stateway.core.generations import Generation, Generations

log = logging.getLogger("stateway.upstreams")

NOT_FOUND_HINT = (
    "is the URL the API's base, with its version path? vLLM, SGLang, llama.cpp, Ollama and "
    "LM Studio serve theirs at http://HOST:PORT/v1"
)


async def check_generation(
    generations: Generations, generation: Generation, urls: Mapping[str, str]
) -> None:
    """:func:`check_upstreams` over ``generation``'s backends, giving back its lease (taken
    by the caller) once done: a reload meanwhile closes no pool the check asks through."""
    try:
        await check_upstreams(generation.router.backends, urls)
    finally:
        generations.release(generation)


async def check_upstreams(backends: Sequence[Backend], urls: Mapping[str, str]) -> None:
    """Warn about each backend whose ``GET /models`` fails; ``urls`` by backend name."""
    await asyncio.gather(*(_check(backend, urls.get(backend.name, "?")) for backend in backends))


async def _check(backend: Backend, url: str) -> None:
    try:
        await backend.list_models()
    except GatewayError as exc:
        if exc.status == 404:
            advice = NOT_FOUND_HINT
        else:
            advice = "requests routed to it fail until it answers"
        log.warning(
            "upstream %s at %s: GET /models failed at start-up (%s): %s",
            backend.name,
            url,
            advice,
            exc.message,
        )
