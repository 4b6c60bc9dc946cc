"""The tools a Chat Completions server takes, as each server it plays takes them.

OpenAI's own Chat Completions takes a ``custom`` tool, and a ``custom`` or
``allowed_tools`` ``tool_choice``. vLLM's request model types ``tools`` as functions and
``tool_choice`` as ``none``, ``auto``, ``required`` or a named function: anything else is
a 400 in pydantic's words. llama.cpp's ``llama-server`` refuses a tool other than a
function too (a 400, "Unsupported tool type") and reads a ``tool_choice`` that is no
string as ``auto``, whatever it says. Which server the fake plays its window tells: one
told as vLLM tells it is vLLM, one told as llama.cpp tells it llama.cpp, any other
OpenAI.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from stateway.fake_upstream.errors import UpstreamError

ToolServer = Literal["openai", "vllm", "llama.cpp"]


def check_tools(body: dict[str, Any], server: ToolServer) -> None:
    """Refuse ``body``'s tools and ``tool_choice`` as ``server`` refuses them."""
    if server == "openai":
        return
    tools = body.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        if isinstance(tool, dict) and tool.get("type", "function") != "function":
            if server == "vllm":
                raise _vllm_literal(f"tools.{index}.type")
            message = f"Unsupported tool type: {orjson.dumps(tool).decode()}"
            raise UpstreamError(400, message, code=400)
    choice = body.get("tool_choice")
    if server == "vllm" and isinstance(choice, dict) and choice.get("type") != "function":
        raise _vllm_literal("tool_choice.type")


def _vllm_literal(field: str) -> UpstreamError:
    """vLLM's 400 for a field its request model types as ``'function'``."""
    message = f"1 validation error for ChatCompletionRequest\n{field}\n  Input should be 'function'"
    return UpstreamError(400, message, type_="BadRequestError", code=400)
