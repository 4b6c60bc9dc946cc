"""The configured web search provider, built once at start-up from ``[web_search]``.

API keys are read from the environment (``BRAVE_API_KEY``, ``TAVILY_API_KEY``, or the
variable ``api_key_env`` names) here, once: a missing one is a ``ValueError`` naming the
variable, so a misconfigured gateway refuses to start instead of failing every search.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from stateway.core.tools.ports import SearchProvider
from stateway.search import brave, tavily
from stateway.search.brave import BraveProvider
from stateway.search.searxng import SearxngProvider
from stateway.search.tavily import TavilyProvider
from stateway.tool_config import WebSearchConfig


def build_search_provider(
    config: WebSearchConfig, environ: Mapping[str, str] | None = None
) -> SearchProvider | None:
    """The provider ``config`` names, or None when none is configured.

    Raises ``ValueError`` when the hosted provider's API-key variable is unset or empty.
    """
    env = os.environ if environ is None else environ
    match config.provider:
        case None:
            return None
        case "searxng":
            if not config.searxng_url:
                raise ValueError("web_search: provider 'searxng' needs searxng_url")
            return SearxngProvider(
                url=config.searxng_url, max_results=config.max_results, timeout=config.timeout
            )
        case "brave":
            return BraveProvider(
                api_key=_api_key(config, env),
                base_url=config.base_url or brave.DEFAULT_BASE_URL,
                max_results=config.max_results,
                timeout=config.timeout,
            )
        case "tavily":
            return TavilyProvider(
                api_key=_api_key(config, env),
                base_url=config.base_url or tavily.DEFAULT_BASE_URL,
                max_results=config.max_results,
                timeout=config.timeout,
            )


def _api_key(config: WebSearchConfig, env: Mapping[str, str]) -> str:
    var = config.key_env
    assert var is not None  # hosted providers always have one
    key = env.get(var, "").strip()
    if not key:
        raise ValueError(
            f"web_search: provider {config.provider!r} needs an API key in the environment "
            f"variable {var}, which is not set (set it, or name another variable with "
            "web_search.api_key_env)"
        )
    return key
