"""``Idempotency-Key`` on the REST writes: a retried request gets the first one's answer.

The key names a command of the caller's (see :mod:`stateway.core.exactly_once`): the
first request with it runs, and every retry, even one that arrives while the first is
still running, is answered with the first one's JSON body, byte for byte, with 200. A
streamed create remembers its response instead, and a retry streams that response's log
from the start (``responses.py``); the Chat Completions and Messages creates, which store
nothing, remember their answers themselves (:mod:`.keyed_runs`). The same key with
another request (method, path, query, body) is a 409 ``idempotency_key_reused``; the
same query parameters in another order are the same request. A request that failed
leaves no answer behind: its retry runs again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import Response

from stateway.core.coordination import Outcome
from stateway.core.exactly_once import fingerprint
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal

HEADER = "idempotency-key"
HEADER_BYTES = HEADER.encode()
"""As ASGI scopes name it (:func:`~stateway.surfaces.asgi.bodies.header`)."""
PARAM = "Idempotency-Key"


def command_id(request: Request) -> str | None:
    return request.headers.get(HEADER)


def request_digest(request: Request, body: bytes = b"", betas: Sequence[str] = ()) -> str:
    """The request's method, path, query (an append's ``include`` shapes its answer) and
    body; a request without a query digests as it did before the query counted, so an
    answer remembered then still answers its retry. ``betas``: the ``anthropic-beta``
    features a Messages request names, which shape what it asks (in any order)."""
    parts = [request.method.encode(), request.url.path.encode(), body]
    query = ordered_query(request.scope.get("query_string", b""))
    if query:
        parts.append(query)
    if betas:
        parts.append(b"anthropic-beta:" + ",".join(sorted(betas)).encode())
    return fingerprint(*parts)


def ordered_query(query: bytes) -> bytes:
    """The query's parameters as the routes read them (as Starlette's ``query_params``
    parses them), sorted by name (a repeated name's values keep their order, which an
    ``include`` list may show), and encoded again as the OpenAI SDK encodes them: the
    same parameters in another order or spelling are the same request, and a query the
    SDK sent, its names in order, digests as it did before queries were sorted."""
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    pairs.sort(key=lambda pair: pair[0])
    return urlencode(pairs).encode()


def replayed(outcome: Outcome) -> Response:
    """The answer a retry gets: the first attempt's JSON body."""
    return Response(outcome.body, media_type="application/json")


async def answered_once(
    gateway: Gateway,
    request: Request,
    principal: Principal,
    answer: Callable[[], Awaitable[Response]],
    body: bytes = b"",
) -> Response:
    """``answer()``, or when the request carries an ``Idempotency-Key``, its first
    answer (``answer`` then runs once per key)."""
    key = command_id(request)
    if key is None:
        return await answer()
    async with gateway.once(principal, key, request_digest(request, body), param=PARAM) as once:
        if once.outcome is not None:
            return replayed(once.outcome)
        response = await answer()
        once.remember(bytes(response.body))
        return response
