"""Request fields of features only Anthropic's own servers have, and what the gateway
does with each: ignore it where the answer is the one asked for without it, refuse it
(a 400 naming the field) where ignoring it would answer another request.

Refused:

- ``fallbacks`` as a list of models (a retry on other models when the model declines):
  what Anthropic answers for a model without server-side fallback. ``"default"`` runs on
  the requested model alone, as Anthropic runs such a model, and is taken.
- ``billing_policy.bill_to: "user_profile"`` (bill the customer behind a user profile,
  the request refused rather than billed to the caller when that cannot be done).

Ignored, the answer being the same: ``speed``, ``inference_geo``, ``diagnostics`` (the
answer has no ``diagnostics``), ``fallback_credit_token``, ``billing_policy``
``bill_to: "self"``, ``container`` (no code execution runs here), ``output_config``
``task_budget``.

Served by the gateway itself: ``thread`` (server-held conversation state,
:mod:`.threads`) and ``compaction`` (:mod:`.compaction`).
"""

from __future__ import annotations

from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.request import MessagesBody


def check_hosted_only(body: MessagesBody) -> None:
    """Refuse the fields of hosted features that ignoring would answer another request."""
    if isinstance(body.fallbacks, list) and body.fallbacks:
        raise field_error(
            "fallbacks",
            # worded as hosted refuses a model without server-side fallback, which
            # Claude Code recognises: it sends the request again without fallbacks
            "The `fallbacks` parameter is not supported: this gateway has no server-side "
            "fallback models; omit it (the SDK's refusal fallback middleware retries on "
            "the client).",
        )
    policy = body.billing_policy
    if policy is not None and policy.get("bill_to") not in (None, "self"):
        raise field_error(
            "billing_policy.bill_to",
            "only 'self' is supported; this gateway cannot bill a user profile.",
        )
