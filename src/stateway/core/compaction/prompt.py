"""The words the gateway adds to a conversation to compact it, and to show a summary.

:data:`SUMMARY_PROMPT` goes to the model as a last ``user`` message after the conversation
to compact (a trailing user turn is what every chat template accepts); the model's answer
is the summary. A Messages compaction request asks with
:data:`STANDALONE_SUMMARY_PROMPT` instead (its summary replaces the user's messages too),
or with the ``instructions`` it gives. When a ``compaction`` item comes back in a later
request, the model sees its summary as a ``user`` message starting with
:data:`SUMMARY_PREFIX`, in the item's place. The fake upstream recognizes
:data:`SUMMARY_PROMPTS` and answers with a transcript of what preceded it, so tests see
real summaries round-trip.
"""

from __future__ import annotations

from typing import Final

from stateway.core.items import MESSAGE, Item

SUMMARY_PROMPT: Final = (
    "Compact the conversation so far into a summary that lets it continue without it. "
    "Whoever continues (you, or another model) will see the user's messages and this "
    "summary, nothing else. Keep what matters: the user's goals, requirements and "
    "preferences; decisions made and why; facts learned; the work done so far (files, "
    "commands, results, errors) and its current state; open questions and the next steps. "
    "Be specific and concise. Answer with the summary only, as plain text; do not call "
    "any tool."
)
"""The summarization instruction, sent as the last user message of a compaction request."""

STANDALONE_SUMMARY_PROMPT: Final = (
    "Compact the conversation so far into a summary that replaces it entirely. Whoever "
    "continues (you, or another model) will see this summary in place of every message "
    "it covers, the user's included, and nothing else of them. Keep what matters: the "
    "user's goals, requirements and preferences, in their own words where it counts; "
    "decisions made and why; facts learned; the work done so far (files, commands, "
    "results, errors) and its current state; open questions and the next steps. Be "
    "specific and concise. Answer with the summary only, as plain text; do not call any "
    "tool."
)
"""The instruction of a compaction whose summary stands for the user's messages too (a
Messages compaction request: its block is sent back in place of the whole conversation),
unless the request gives its own."""

SUMMARY_PROMPTS: Final = frozenset({SUMMARY_PROMPT, STANDALONE_SUMMARY_PROMPT})
"""The gateway's own summarization instructions (which the fake upstream recognizes)."""

SUMMARY_PREFIX: Final = (
    "Earlier turns of this conversation were compacted into the summary below. Continue "
    "from it.\n\n"
)
"""What precedes a summary when the model is shown it in place of a compaction item."""


def prompt_message(prompt: str = SUMMARY_PROMPT) -> Item:
    """A summarization instruction as the last user message of a summary call."""
    return {
        "type": MESSAGE,
        "role": "user",
        "content": [{"type": "input_text", "text": prompt}],
    }
