"""WebSocket mode: ``GET /v1/responses`` upgraded (ADR 0010, docs/websocket.md).

Transport only, in three layers: :mod:`.outbox` (one writer per connection, bounded by
bytes), :mod:`.lanes` (requests FIFO per ``stream_id``, the caps, the checkpoints kept
for continuation) and :mod:`.session` (the receive loop: frames decoded by
:mod:`stateway.protocols.responses.frames` into commands for ``Gateway.execute``);
:mod:`.endpoint` is the route's ASGI app and the drain at shutdown.
"""
