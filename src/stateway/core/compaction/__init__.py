"""Context management: what the model sees of a long conversation, and how it shrinks.

- :mod:`.prompt`: the summarization instruction the gateway sends, and how a summary is
  shown to the model afterwards.
- :mod:`.sealed`: the sealed ``encrypted_content`` of ``compaction`` items (a summary) and
  of ``reasoning`` items (the model's reasoning), over the :class:`~stateway.core.ports.Sealer`
  port.
- :mod:`.view`: a context as the model sees it: sealed items opened, the last
  ``compaction`` item in place of what it summarized, ``compaction_trigger`` left out.
- :mod:`.clearing`: context editing (Messages' ``clear_thinking_20251015`` and
  ``clear_tool_uses_20250919`` edits): old thinking and tool results left out of, or
  replaced in, the model's view.
- :mod:`.truncation`: ``truncation: "auto"``, dropping the oldest turns to fit the window.
- :mod:`.summarize`: one summarization call to the backend.
- :mod:`.summary_window`: that call fitted to the model's window, and to its refusals.
- :mod:`.excerpt`: an item too large for that call alone, shown as its head and tail.
- :mod:`.reasoning_output`: reasoning items finished with a summary and/or sealed text, as the
  request asks (``reasoning.summary``, ``include``).
- :mod:`.service`: :class:`~.service.Compaction`, which the gateway uses for
  ``/responses/compact``, for the context ``/responses/input_tokens`` counts and, within a
  response, for a ``compaction_trigger`` or a ``context_management`` threshold
  (:class:`~.service.CompactionStep`).
- :mod:`.between_rounds`: that threshold checked again before each later round of a
  response's tool loop, which compacts there (once a response).

Sizes are the gateway's estimate, :mod:`stateway.core.token_estimate`.
"""
