"""The Anthropic Messages protocol: wire <-> canonical."""
