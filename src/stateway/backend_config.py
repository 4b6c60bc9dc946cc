"""The configuration's ``[[backends]]`` tables: the model servers, how to reach them, what
they serve, and the limits of a call to them."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator

from stateway.backends.anthropic_request import Sampling
from stateway.backends.chat_request import REASONING_FIELDS, ReasoningField, ToolCallContent
from stateway.backends.reasoning_efforts import NONE, Effort
from stateway.config_section import Section, VariableName
from stateway.core.headers import is_header_name, is_header_value
from stateway.redaction import masked_url
from stateway.tool_config import checked_gateway_tools

HOSTED_OPENAI_HOST = "api.openai.com"
HOSTED_OPENAI_LEAST_OUTPUT = 16
"""Hosted OpenAI's Responses API refuses a ``max_output_tokens`` under 16 (a 400)."""
HOSTED_ANTHROPIC_HOST = "api.anthropic.com"
"""Anthropic's API, which runs the checks Claude Code's ``safeguards`` ask for."""
SAMPLING_REMOVED = "2026-10-21"
"""The first ``anthropic-version`` without ``temperature``, ``top_p`` and ``top_k``."""


class BackendConfig(Section):
    name: str = Field(min_length=1)
    url: str
    api: Literal["chat", "responses", "anthropic"] = "chat"
    api_key_env: VariableName | None = None
    models: list[str] | dict[str, str] = Field(default_factory=list)
    connect_timeout: float = Field(default=10.0, gt=0)
    read_timeout: float = Field(default=600.0, gt=0)
    max_connections: int = Field(default=256, ge=1)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """Chat upstreams: the field ``max_output_tokens`` is sent as."""
    guided_decoding: Literal["vllm", "vllm-legacy"] | None = None
    """Chat upstreams: how a forced ``custom`` tool's grammar is enforced (``vllm``:
    ``structured_outputs``; ``vllm-legacy``: ``guided_grammar``); default: described to
    the model only. See ``backends/guided_decoding.py``."""
    alternate_roles: bool = False
    """Chat upstreams: send consecutive user messages as one, for chat templates that
    refuse them ("roles must alternate": Mistral's older templates, Llama 2's)."""
    reasoning_efforts: list[Effort] | None = Field(default=None, min_length=1)
    """Chat upstreams: the ``reasoning_effort`` levels the server takes (vLLM before the
    OpenAI SDK's wider set: ``low``, ``medium``, ``high``); another is sent at the nearest
    one (:mod:`stateway.backends.reasoning_efforts`). Default: every effort as asked."""
    reasoning_fields: list[ReasoningField] = Field(default_factory=lambda: [*REASONING_FIELDS])
    """Chat upstreams: the assistant message fields a model's earlier reasoning is sent
    back in. Default both: llama.cpp and SGLang read ``reasoning_content``, current vLLM
    only ``reasoning``, each ignoring the other. A server that refuses one (Cerebras
    refuses ``reasoning_content``) gets the other; ``[]`` leaves earlier reasoning out."""
    tool_call_content: ToolCallContent | None = None
    """Chat upstreams: the ``content`` an earlier assistant message holding only tool calls
    is sent with: ``"null"``, the spec's (which strict proxies and shims before Anthropic or
    Gemini need: they refuse ``""``), or ``""``, for a server that refuses null (LM Studio:
    "'content' field must be a string or an array of objects"; mlx-lm's server fails on
    it, ml-explore/mlx-lm#185) or whose chat template mishandles it. Text beside the calls
    is sent as it is. Default: null, and ``""`` from the first call the server refuses in
    LM Studio's words on (that call sent again once, before any output:
    :meth:`~stateway.backends.openai_chat.ChatBackend._null_refused`). Not on the Chat
    Completions fast path, where the client's own messages go."""
    think_tags: Literal[False, True, "opened"] = False
    """Chat upstreams: ``true`` takes reasoning a reply's content opens with between
    ``<think>`` and ``</think>`` (an open reasoning model's, on a server without a reasoning
    parser) out of its text, as reasoning (:mod:`stateway.backends.think_tags`);
    ``"opened"``, for a chat template whose generation prompt opens the block (DeepSeek-R1's,
    Qwen3's thinking-only ones), reads a reply as reasoning from its start up to
    ``</think>``. Such a backend is never on the Chat Completions fast path. Default:
    content as the model wrote it."""
    thinking_switch: str | None = Field(default=None, min_length=1)
    """Chat upstreams: the flag a chat template turns thinking on and off by
    (``enable_thinking``: Qwen3, GLM; ``thinking``: DeepSeek-V3.1, Granite), which such a
    template reads instead of ``reasoning_effort``: sent in ``chat_template_kwargs``, false
    when the client asked for no reasoning (the effort ``none``, Messages' ``thinking:
    disabled``), true for another effort (:mod:`stateway.backends.thinking_switch`).
    Default: none sent (the template's own default)."""
    min_output_tokens: int | None = Field(default=None, ge=1)
    """Responses upstreams: the least ``max_output_tokens`` the server takes (hosted
    OpenAI refuses one under 16 with a 400; vLLM takes any). A later round of the gateway's
    tool loop left less of a response's budget is not asked: the response ends
    ``incomplete`` (``max_output_tokens``), as when nothing is left. Default: hosted
    OpenAI's 16 for a ``url`` on ``api.openai.com``, any elsewhere
    (:meth:`least_output_tokens`)."""
    anthropic_version: str = Field(default="2023-06-01", min_length=1)
    """Anthropic upstreams: the ``anthropic-version`` header sent on every call."""
    default_max_tokens: int = Field(default=4096, ge=1)
    """Anthropic upstreams: the ``max_tokens`` sent when the client set no limit (the
    Messages API requires one)."""
    thinking: Literal["enabled", "adaptive"] = "enabled"
    """Anthropic upstreams: how a reasoning effort without a token budget is asked for:
    ``enabled`` with a budget derived from the effort, or ``adaptive`` with the effort
    as ``output_config.effort`` (newer models). A model whose listing says it takes only
    one of them is asked for that one (:mod:`stateway.backends.anthropic_thinking`)."""
    prompt_cache_mode: Literal["implicit", "explicit"] = "implicit"
    """Anthropic upstreams: how a Responses or Chat Completions request that names no
    ``prompt_cache_options.mode`` is cached. ``implicit``, as hosted OpenAI caches it:
    Anthropic's automatic caching (a top-level ``cache_control``), beside the request's
    breakpoints; ``explicit``: only the breakpoints it marks (no cache writes, which cost
    more than plain input, unless asked). A Messages client marks its own
    (:mod:`stateway.backends.anthropic_caching`)."""
    safeguards: bool | None = None
    """Anthropic upstreams: whether the server runs the checks a Messages request's
    ``safeguards`` ask for (Claude Code's auto mode: Anthropic's review of risky tool
    calls), so the field is sent on and the answer's ``safeguard_results`` come back to the
    client. Else it is not sent (an Anthropic-compatible server may refuse it, and the
    classifier context it holds is for Anthropic) and Claude Code checks its actions
    itself. Default: Anthropic's API, a ``url`` on ``api.anthropic.com``
    (:meth:`runs_safeguards`)."""
    sampling: Sampling | None = None
    """Anthropic upstreams: which of a request's ``temperature``, ``top_p`` and ``top_k``
    the model takes: ``all``, as asked (open models, Claude models before Sonnet 4.5);
    ``one``, ``temperature`` or else ``top_p``, never both (Claude from Sonnet 4.5 to Opus
    4.6 refuse both); ``none`` (Claude from Opus 4.7 on refuse each). What the model does
    not take is left out, not refused: clients send these on every request. Default:
    ``none`` for an ``anthropic_version`` of 2026-10-21 or later (that API has none),
    else ``all`` (:meth:`sent_sampling`)."""
    total_timeout: float = Field(default=1800.0, gt=0)
    """The longest a whole upstream call (one inference round) may take."""
    first_byte_timeout: float | None = Field(default=None, gt=0)
    """The longest to wait for the upstream's response headers; default: ``read_timeout``."""
    first_token_timeout: float | None = Field(default=None, gt=0)
    """The longest to wait, after the response headers, for the upstream's first output
    (text, reasoning, a tool call; a non-streamed reply's body; on the Chat Completions
    fast path, the first body chunk): past it the attempt fails as an upstream timeout and
    the route fails over, as before the headers. Never once output has started. Default:
    unbounded (``read_timeout`` still bounds every silence)."""
    max_response_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    """The most bytes one upstream reply (streamed or not) may carry."""
    pool_idle_timeout: float = Field(default=4.0, gt=0)
    """How long an idle pooled connection is kept; keep it below the upstream's keep-alive
    (uvicorn-based servers such as vLLM close idle connections after 5 s)."""
    pool_timeout: float = Field(default=30.0, gt=0)
    """The longest a request waits for one of ``max_connections`` connection slots."""
    context_window: int | None = Field(default=None, ge=1)
    """The context window (tokens) of the models this backend serves: ``truncation:
    "auto"`` drops the oldest turns to fit it, and a ``context_management`` compaction
    without ``compact_threshold`` triggers at 80% of it. Default: as the model server
    advertises it (``discover_context_window``), else unknown (neither)."""
    discover_context_window: bool = True
    """Learn the window of each model a candidate names, where neither ``context_window``
    nor the candidate's ``capabilities`` set one, from the model server itself, in the
    background from start-up (and again after a reload): vLLM's and SGLang's
    ``max_model_len``, llama.cpp's per-slot ``n_ctx`` (``/props``), Anthropic's
    ``max_input_tokens``. ``false``: only the configured window
    (:mod:`stateway.core.routing.windows`)."""

    cache_salt: Literal["tenant"] | None = None
    """Chat and Responses upstreams: ``tenant`` sends every call with its tenant's
    ``cache_salt`` (vLLM's), so tenants do not share the server's prefix cache and cannot
    tell from an answer's speed or ``cached_tokens`` what another sent; derived from the
    server key (:mod:`stateway.sealing.cache_salts`). Default: none (one shared cache)."""

    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent on every call to this backend (a proxy's own, an Anthropic upstream's
    ``anthropic-beta``: a Messages client's betas are added to it). The key's header and
    ``anthropic-version`` have settings of their own."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Fields every inference call to this backend carries unless the call sets them
    itself: a server's own parameters (vLLM's ``chat_template_kwargs``, ``top_k``,
    ``repetition_penalty``; llama.cpp's ``cache_prompt``). On the Chat Completions fast
    path the client's body is the call: its fields win, whole (not merged into)."""

    gateway_tools: list[dict[str, Any]] = Field(default_factory=list)
    """Gateway-owned tools (Responses-shaped ``mcp`` / ``web_search`` tools) offered to
    every model of this backend on the Chat Completions and Messages frontends, whose
    clients cannot declare them; they run in hidden rounds (``core/hidden.py``)."""

    def least_output_tokens(self) -> int:
        """``min_output_tokens`` as set, else as the server at ``url`` is known to take."""
        if self.min_output_tokens is not None:
            return self.min_output_tokens
        host = urlsplit(self.url).hostname
        return HOSTED_OPENAI_LEAST_OUTPUT if host == HOSTED_OPENAI_HOST else 1

    def runs_safeguards(self) -> bool:
        """``safeguards`` as set, else whether ``url`` is Anthropic's API."""
        if self.safeguards is not None:
            return self.safeguards
        return urlsplit(self.url).hostname == HOSTED_ANTHROPIC_HOST

    def sent_sampling(self) -> Sampling:
        """``sampling`` as set, else as the ``anthropic_version`` has it."""
        if self.sampling is not None:
            return self.sampling
        return "none" if self.anthropic_version >= SAMPLING_REMOVED else "all"

    @field_validator("gateway_tools")
    @classmethod
    def _gateway_tools(cls, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return checked_gateway_tools(tools)

    @field_validator("reasoning_efforts")
    @classmethod
    def _reasoning_efforts(cls, efforts: list[str] | None) -> list[str] | None:
        if efforts is None:
            return None
        repeated = sorted({effort for effort in efforts if efforts.count(effort) > 1})
        if repeated:
            raise ValueError(f"{', '.join(map(repr, repeated))} listed more than once")
        if set(efforts) == {NONE}:
            raise ValueError("must name a level of reasoning besides 'none'")
        return efforts

    @field_validator("cache_salt")
    @classmethod
    def _cache_salt(cls, salt: str | None, info: ValidationInfo) -> str | None:
        if salt is not None and info.data.get("api") == "anthropic":
            raise ValueError(
                "an Anthropic upstream cannot be salted: the Messages API has no cache_salt "
                "field; its prompt cache is shared by every call made with the backend's key"
            )
        return salt

    @field_validator("prompt_cache_mode")
    @classmethod
    def _prompt_cache_mode(cls, mode: str, info: ValidationInfo) -> str:
        _only_for(
            "anthropic",
            info,
            "only an anthropic upstream is marked for prompt caching: chat and responses "
            "upstreams are sent the request's own prompt_cache_options",
        )
        return mode

    @field_validator("sampling")
    @classmethod
    def _sampling(cls, sampling: Sampling | None, info: ValidationInfo) -> Sampling | None:
        if sampling is not None:
            _only_for(
                "anthropic",
                info,
                "only an anthropic upstream's sampling is chosen: chat and responses "
                "upstreams are sent the request's own",
            )
        return sampling

    @field_validator("think_tags")
    @classmethod
    def _think_tags(
        cls, tagged: bool | Literal["opened"], info: ValidationInfo
    ) -> bool | Literal["opened"]:
        if tagged:
            _only_for(
                "chat",
                info,
                "only a chat upstream's content is read for <think> tags: a responses or "
                "anthropic upstream sends its reasoning apart",
            )
        return tagged

    @field_validator("tool_call_content")
    @classmethod
    def _tool_call_content(
        cls, content: ToolCallContent | None, info: ValidationInfo
    ) -> ToolCallContent | None:
        if content is not None:
            _only_for(
                "chat",
                info,
                "only a chat upstream is sent assistant messages of tool calls: a responses "
                "or anthropic upstream is sent the calls as items or blocks",
            )
        return content

    @field_validator("thinking_switch")
    @classmethod
    def _thinking_switch(cls, switch: str | None, info: ValidationInfo) -> str | None:
        if switch is not None:
            _only_for(
                "chat",
                info,
                "only a chat upstream's template takes chat_template_kwargs: a responses "
                "or anthropic upstream is sent the effort itself",
            )
        return switch

    @property
    def effective_first_byte_timeout(self) -> float:
        return self.read_timeout if self.first_byte_timeout is None else self.first_byte_timeout

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not is_header_name(name):
                raise ValueError(f"header name {name!r} is not an HTTP token")
            if not is_header_value(value):
                raise ValueError(f"header {name!r}: the value must be printable ASCII")
        return headers

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        if "?" in url or "#" in url:  # not the URL itself: its query may hold a key
            raise ValueError(
                "must not carry a query (?...) or a fragment: each call's path "
                "(/chat/completions, /responses, /messages, /models) is added to it; "
                "send a server's own parameters as extra_body or headers"
            )
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - read for its ValueError: a port out of range, or no number
        except ValueError:
            parts = None
        if parts is None or not parts.hostname:
            # Else every call fails, and the HTTP client's error shows the URL whole.
            raise ValueError("must name a host (and a port from 0 to 65535, if any)")
        return url.rstrip("/")

    @property
    def shown_url(self) -> str:
        """``url`` as the start-up banner and the log show it: a password in it (which
        the server is sent as Basic credentials) masked."""
        return masked_url(self.url)

    @property
    def model_map(self) -> dict[str, str]:
        if isinstance(self.models, dict):
            return dict(self.models)
        return {name: name for name in self.models}

    @property
    def catch_all(self) -> bool:
        return not self.models


def _only_for(api: str, info: ValidationInfo, refusal: str) -> None:
    """Refuse a setting of one upstream API's (``refusal`` says why) on a backend of
    another (``chat`` when none is named)."""
    if info.data.get("api", "chat") != api:
        raise ValueError(refusal)
