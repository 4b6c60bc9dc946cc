"""The HTTP surface: REST + SSE over Starlette."""
