"""The gateway's hop on the requests it sends upstream, for catching a request loop.

A backend URL that points at the gateway itself (its own port given for the model
server's, or a proxy in front of it) sends each request back in: the gateway routes it
upstream again, hop after hop, each holding a connection and logging a failure, until the
backend's connection slots run out (its ``pool_timeout`` later, a 503 the first request
gets). So every request the backends send carries a ``Via`` entry naming this process by
a random pseudonym (RFC 9110's way for a proxy to detect loops: it tells nothing of the
host), and a request arriving with it is refused at once
(:mod:`stateway.surfaces.asgi.loops`). The pseudonym is the process's, kept across
reloads, so a reload onto the gateway's own address is caught too.
"""

from __future__ import annotations

import secrets

VIA_HEADER = "Via"


class Hop:
    """This process's ``Via`` entry: ``1.1 stateway-<random>``."""

    __slots__ = ("pseudonym", "via")

    def __init__(self) -> None:
        self.pseudonym = f"stateway-{secrets.token_hex(8)}"
        self.via = f"1.1 {self.pseudonym}"
        """The header's value on a request the gateway sends."""

    def sent(self, via: str) -> bool:
        """Whether a ``Via`` header's value names this process: a request it sent."""
        return any(
            entry.split()[1:2] == [self.pseudonym] for entry in via.split(",") if entry.strip()
        )
