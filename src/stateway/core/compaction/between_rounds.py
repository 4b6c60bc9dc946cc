"""A ``context_management`` threshold checked again between the rounds of a response's
tool loop.

A response that did not compact as it started may still cross its threshold on the way:
each round of the gateway's tool loop (MCP tools, web search, run by the gateway) sends
the context and the output so far, calls and their results included, and a later round can
grow past the threshold, and past the model's window. As hosted OpenAI's server-side
compaction does (its guide: when the context crosses the threshold while the response
streams, a compaction pass runs, its item is emitted in that stream and the context is
pruned before inference goes on), :class:`Threshold` is checked before
each round whose output holds something (what the start did not measure), by the same
estimate; once crossed, that round is preceded by a :class:`~.service.CompactionStep`:
its summary is of what the round would have been sent, its ``compaction`` item is output
there (after the tools' items, before the round's own), and the rounds after it send the
model view of the whole context and that item (the ``system``, ``developer`` and
``user`` messages, then the summary), then what is output after it.

A response compacts at most once: the first crossing, or as it started. Hosted documents
no count, and one item per response keeps what clients replay simple (the rounds after it
may grow past the threshold again; the next response compacts then).

Messages' autocompact is checked only as the response starts
(:meth:`.service.Compaction.prepare` gives no threshold for its entries, which say
``pause_after_compaction``): a Messages client sends the ``compaction`` block back as the
first block of its conversation, so one amid an answer's content would be refused on the
next turn.
"""

from __future__ import annotations

from stateway.core.compaction.service import CompactionStep
from stateway.core.items import Item
from stateway.core.ports import Sealer
from stateway.core.token_estimate import estimate_context


class Threshold:
    """A response's ``context_management`` threshold, as its tool loop checks it."""

    def __init__(
        self, sealer: Sealer | None, tenant_id: str, context: list[Item], threshold: int
    ) -> None:
        self._sealer = sealer
        self._tenant_id = tenant_id
        self._context = context
        """The context as the response started, before its model view: what the rounds
        after the compaction see the model view of, with the output before it."""
        self.threshold = threshold

    def crossed(
        self,
        instructions: str | None,
        context: list[Item],
        output: list[Item],
        tools: list[Item],
        made: list[Item],
    ) -> CompactionStep | None:
        """The compaction a round owes first, when what it would send (``context``, the
        rounds' view, and ``output`` as they send it) is at least the threshold; ``made``:
        the output as it is (stored, returned), which the compaction item follows."""
        sent = [*context, *output]
        if estimate_context(instructions, sent, tools) < self.threshold:
            return None
        whole = [*self._context, *made]
        return CompactionStep(self._sealer, self._tenant_id, whole, sent, alone=False)
