"""The OpenAI Chat Completions protocol: wire <-> canonical."""
