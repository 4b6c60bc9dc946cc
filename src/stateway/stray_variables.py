"""``STATEWAY_*`` environment variables that set nothing, told as warnings.

A variable's name typo'd (``STATEWAY_UPSTREAM_URL`` for ``STATEWAY_UPSTREAM``,
``STATEWAY_PROT``) is otherwise ignored in silence, and the default served in its place.
``serve`` and ``check-config`` warn of each ``STATEWAY_*`` variable that is no setting's,
not named by the configuration (a backend's ``api_key_env``, ``[admin] api_key_env``, an
MCP server's ``headers_env``, ``[web_search] api_key_env``) and not the test suite's,
with the nearest setting's variable when one is near.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from stateway.config import FLAG_VARIABLES, SEALING_KEY_ENV, Config
from stateway.config_origins import setting_variables

_PREFIX = "STATEWAY_"
_TEST_SUITE = tuple(
    _PREFIX + name for name in ("TEST", "CLIENTS_DIR", "LLAMA_SERVER", "HYPOTHESIS")
)
"""Prefixes of the variables the test suite and its scripts read (README, ``make test``),
none of them the gateway's."""


def stray_variables(config: Config, env: Mapping[str, str]) -> list[str]:
    """A warning for each ``STATEWAY_*`` variable of ``env`` that sets nothing, sorted."""
    settings = {*setting_variables(), *FLAG_VARIABLES.values(), SEALING_KEY_ENV}
    named = {config.admin.api_key_env, *(b.api_key_env for b in config.backends)}
    named |= {var for server in config.mcp_servers.values() for var in server.headers_env.values()}
    named.add(config.web_search.api_key_env)
    warnings = []
    for var in sorted(env):
        if not var.startswith(_PREFIX) or var.startswith(_TEST_SUITE):
            continue
        if var in settings or var in named:
            continue
        warning = f"{var} is no setting's variable (ignored)"
        # Compared without the prefix they all share, which would make any two near.
        names = [name.removeprefix(_PREFIX) for name in settings]
        near = difflib.get_close_matches(var.removeprefix(_PREFIX), names, n=1, cutoff=0.7)
        warnings.append(warning + (f"; did you mean {_PREFIX}{near[0]}?" if near else ""))
    return warnings
