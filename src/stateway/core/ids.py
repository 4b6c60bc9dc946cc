"""Object ids in the OpenAI style: a prefix and 48 random hex digits."""

from __future__ import annotations

import os


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(24).hex()}"
