"""Declared tools of the Responses wire, checked and normalized: :mod:`.decode` (every
tool, dispatched by its ``type``), :mod:`.client` (client-owned kinds, and the names the
model sees), :mod:`.gateway` (``mcp`` and ``web_search``), :mod:`.fields` (the checks of
field values that every kind shares)."""
