"""``GET /v1/usage``: token usage by tenant, model and UTC day, from stored responses.

Query parameters: ``start_time`` and ``end_time`` (Unix seconds, whole; responses created
at or after the one and before the other) and ``tenant``. An admin (the admin credential)
sees every tenant, or the one ``tenant`` names; anyone else sees their own tenant's usage
only (the credential's, ``surfaces/auth``), and naming another tenant gets the answer a
tenant without usage gets (an empty list), so the route tells nobody which tenants
exist. The answer::

    {"object": "list", "data": [{"object": "usage.bucket", "tenant": "default",
      "model": "m", "date": "2026-12-01", "responses": 3, "input_tokens": 120,
      "output_tokens": 45, "total_tokens": 165}]}
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

from stateway.core.accounting import UsageBucket
from stateway.core.commands import GetUsage
from stateway.core.errors import InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.surfaces.asgi.answers import JSONResponse
from stateway.surfaces.auth.authenticator import identity_of, principal_of


class UsageRoutes:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def usage(self, request: Request) -> Response:
        params = request.query_params
        start, end = _time(params, "start_time"), _time(params, "end_time")
        asked = params.get("tenant") or None
        identity = identity_of(request.scope)
        if identity.admin:
            principal = identity.principal or Principal(subject="admin")
            tenant = asked
        else:
            principal = principal_of(request.scope)
            if asked is not None and asked != principal.tenant_id:
                return JSONResponse(_encode([]))  # as for a tenant without usage
            tenant = principal.tenant_id
        buckets = await self._gateway.execute(principal, GetUsage(tenant, start, end))
        return JSONResponse(_encode(buckets))


def _time(params: Mapping[str, str], name: str) -> float | None:
    value = params.get(name)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()):
        raise InvalidRequest(
            f"'{name}' must be Unix seconds (a whole number), got {value[:40]!r}.",
            param=name,
            code="invalid_value",
        )
    return float(value)


def _encode(buckets: list[UsageBucket]) -> dict[str, object]:
    return {
        "object": "list",
        "data": [
            {
                "object": "usage.bucket",
                "tenant": b.tenant_id,
                "model": b.model,
                "date": b.day.isoformat(),
                "responses": b.responses,
                "input_tokens": b.input_tokens,
                "output_tokens": b.output_tokens,
                "total_tokens": b.total_tokens,
            }
            for b in buckets
        ],
    }
