"""The OpenAI Conversations API: request decoding and object encoding. Items are the
Responses API's input items, decoded by :mod:`stateway.protocols.responses.items`."""
