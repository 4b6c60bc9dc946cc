"""The composition root: the only package that wires concrete classes together.

``generation.py`` compiles a configuration into a generation (backends, routes, the
gateway's tools; a new backend API shape is one entry in ``BACKEND_APIS``);
``gateway.py`` builds the process's gateway over it (store, coordination, leases,
telemetry, sealing and cache salts); ``http.py`` builds the HTTP app over that (a new
surface is one more routes object there).
"""

from stateway.app.gateway import GatewayParts, build_gateway, open_gateway, open_server_key
from stateway.app.generation import (
    BACKEND_APIS,
    backend_gateway_tools,
    build_backend,
    build_route,
    build_router,
    build_tools,
    compile_generation,
)
from stateway.app.http import (
    TESTING_JWKS_COOLDOWN_ENV,
    TESTING_KEEPALIVE_ENV,
    TESTING_RECHECK_ENV,
    build_app,
    build_authenticator,
)

__all__ = [
    "BACKEND_APIS",
    "TESTING_JWKS_COOLDOWN_ENV",
    "TESTING_KEEPALIVE_ENV",
    "TESTING_RECHECK_ENV",
    "GatewayParts",
    "backend_gateway_tools",
    "build_app",
    "build_authenticator",
    "build_backend",
    "build_gateway",
    "build_route",
    "build_router",
    "build_tools",
    "compile_generation",
    "open_gateway",
    "open_server_key",
]
