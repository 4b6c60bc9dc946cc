"""The OpenAI Responses API: request decoding, response and event encoding."""
