"""Authentication, shared by every surface: a request's credential (``Authorization:
Bearer`` or ``x-api-key``) turned into an :class:`~.authenticator.Identity`, whose
principal the surface passes to ``Gateway.execute``.

- :mod:`.credentials`: reading the credential from request headers, refusing malformed,
  oversized or ambiguous ones;
- :mod:`.authenticator`: what a credential proves (the admin key, an API key through
  :class:`~stateway.identity.key_cache.KeyCache`, an OIDC token through
  :class:`~stateway.identity.oidc.OidcVerifier`), and the identity a surface reads back.

The HTTP surface authenticates every request and WebSocket upgrade in one middleware
(``surfaces/http/authentication.py``); the MCP surface reads the identity it left.
"""
