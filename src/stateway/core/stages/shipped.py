"""The stages the package ships (entry points in ``pyproject.toml``)."""

from __future__ import annotations

from dataclasses import replace

from stateway.core.stages.context import StageContext


class ToolFilter:
    """``tool_filter``: offer only ``allow``-listed function tools (when given), never
    ``deny``-listed ones. Other tool types pass."""

    def __init__(self, allow: list[str] | None = None, deny: list[str] | None = None) -> None:
        self.allow = None if allow is None else frozenset(allow)
        self.deny = frozenset(deny or [])

    def tool_catalog_filter(self, context: StageContext) -> None:
        context.tools = [tool for tool in context.tools if self._offered(tool)]

    def _offered(self, tool: dict[str, object]) -> bool:
        if tool.get("type") != "function":
            return True
        name = tool.get("name")
        if name in self.deny:
            return False
        return self.allow is None or name in self.allow


class ParamClamp:
    """``param_clamp``: lower a ``max_output_tokens`` above the limit to it (and set it
    when the client set none); a smaller one is left as it is."""

    def __init__(self, max_output_tokens: int) -> None:
        if not isinstance(max_output_tokens, int) or max_output_tokens < 1:
            raise ValueError("max_output_tokens must be a positive integer")
        self.max_output_tokens = max_output_tokens

    def request_shaping(self, context: StageContext) -> None:
        command = context.command
        if command is None:
            return
        current = command.settings.max_output_tokens
        if current is None or current > self.max_output_tokens:
            limit = self.max_output_tokens
            command.settings = replace(command.settings, max_output_tokens=limit)
