"""Who is asking: the principal a surface authenticated, and the scope of what is kept per
caller (command outcomes, rate limits, MCP sessions).

The surfaces build it (``surfaces/auth``); every command the core runs carries one, and
every read and write is scoped by its tenant.
"""

from __future__ import annotations

from enum import StrEnum

from stateway.core.immutable import immutable

DEFAULT_TENANT = "default"


class Credential(StrEnum):
    """What proved a principal: callers proved by different kinds never share a scope."""

    NONE = "none"
    """No auth configured: every caller is the default tenant."""
    API_KEY = "key"
    TOKEN = "oidc"


@immutable
class Principal:
    """Who is asking, as a surface authenticated it (``surfaces/auth``): without auth
    configured, every caller is the default tenant."""

    tenant_id: str = DEFAULT_TENANT
    subject: str = "anonymous"
    """Who within the tenant (an API key's id, a token's ``sub``)."""
    credential: Credential = Credential.NONE

    @property
    def scope(self) -> str:
        """Who within the tenant as what is kept per caller is keyed (command ids, rate
        limits, MCP sessions): an issuer picks a token's ``sub``, which may equal an API
        key's id, so a token's is its ``sub`` under an ``oidc:`` prefix (no key id,
        ``key_...``, has it). Others' are their subjects, as before tokens were set
        apart: what is stored under them (command outcomes) stays theirs."""
        if self.credential is Credential.TOKEN:
            return f"{Credential.TOKEN}:{self.subject}"
        return self.subject
