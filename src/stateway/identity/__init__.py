"""Who a caller is: API keys (their format, digest and store port) and OpenID Connect
tokens (verified against an issuer's discovery document and JWKS).

This package knows credentials and nothing of transports: the surfaces read a
credential from a request (:mod:`stateway.surfaces.auth`) and ask here what it proves;
the core only ever sees the :class:`~stateway.core.principal.Principal` that results.
"""
