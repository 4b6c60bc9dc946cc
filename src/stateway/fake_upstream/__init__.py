"""A deterministic, OpenAI-compatible fake model server, scripted by the user's text.

Used by the test suite, as the "direct" baseline of the benchmarks, and by users trying
the gateway without a GPU. It serves ``/v1/models``, ``/v1/chat/completions`` and a
stateless ``/v1/responses``; ``[[...]]`` directives in the last user message decide the
answer (see :mod:`stateway.fake_upstream.script`).

- :func:`build_app` returns the ASGI app;
- :func:`serve` runs it with uvicorn and prints ``fake-upstream listening on URL``;
- :func:`stateway.fake_upstream.launch.start_fake_upstream` runs it in a subprocess.
"""

from stateway.fake_upstream.app import FakeUpstreamApp, build_app
from stateway.fake_upstream.server import serve

__all__ = ["FakeUpstreamApp", "build_app", "serve"]
