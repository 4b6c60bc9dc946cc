"""What a ``tools/call`` answers: the tool's object as structured content and as JSON
text (with a link to its resource), or an error in the OpenAI error shape flagged
``isError`` (a gateway error, a generic internal one, or the arguments refused: each at
fault named, as ``param`` when it is the only one).
"""

from __future__ import annotations

import orjson
from mcp_types import CallToolResult, ContentBlock, ResourceLink, TextContent
from pydantic import ValidationError

from stateway.surfaces.mcp.tools import Result


def succeeded(result: Result, link: ResourceLink | None) -> CallToolResult:
    """The object as structured content and as JSON text, then a link to its resource."""
    content: list[ContentBlock] = [TextContent(type="text", text=orjson.dumps(result).decode())]
    if link is not None:
        content.append(link)
    return CallToolResult(content=content, structured_content=result)


def failed(error: dict[str, str | None]) -> CallToolResult:
    body = {"error": error}
    text = orjson.dumps(body).decode()
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=body, is_error=True
    )


def invalid_arguments(tool: str, exc: ValidationError) -> CallToolResult:
    """The arguments of ``tool`` refused: each problem told, the one at fault named."""
    return failed(
        {
            "message": invalid_message(tool, exc),
            "type": "invalid_request_error",
            "param": param_of(exc),
            "code": "invalid_arguments",
        }
    )


def unreadable_numbers(tool: str) -> CallToolResult:
    """Arguments of ``tool`` holding a number no JSON body may (as the HTTP routes refuse
    it): beyond a float's range, NaN or an infinity."""
    return failed(
        {
            "message": f"Invalid arguments for {tool}: a number is NaN, infinite or beyond "
            "the range of a 64-bit float.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_arguments",
        }
    )


def param_of(exc: ValidationError) -> str | None:
    """The argument at fault, when all the errors name one (``metadata.team``,
    ``input[0]``); None when several are."""
    places = {e["loc"] for e in exc.errors(include_url=False)}
    if len(places) != 1:
        return None
    [place] = places
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in place).lstrip(".") or None


def invalid_message(tool: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )
    return f"Invalid arguments for {tool}: {problems}"
