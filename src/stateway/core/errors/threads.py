"""A Messages thread's refusals (:mod:`stateway.core.threads`): a continue that names no
usable thread state, a message continued twice, or one still being continued."""

from __future__ import annotations

from typing import Final

from stateway.core.errors.gateway_error import InvalidRequest, NotFound

THREAD_NOT_FOUND: Final = "thread_not_found"
THREAD_ALREADY_CONTINUED: Final = "thread_already_continued"
THREAD_CONTINUE_IN_FLIGHT: Final = "thread_continue_in_flight"
THREAD_CODES: Final = frozenset(
    {THREAD_NOT_FOUND, THREAD_ALREADY_CONTINUED, THREAD_CONTINUE_IN_FLIGHT}
)
"""The codes of a Messages thread's refusals (:mod:`stateway.core.threads`), which the
Messages wire shows as ``error.details.error_code``: what the ``anthropic`` SDK picks its
error class by."""


class ThreadNotFound(NotFound):
    """No usable thread state for the message a continue names: unknown, another
    tenant's, deleted, not made in a thread, or a turn that failed (nothing was kept)."""

    code = THREAD_NOT_FOUND

    def __init__(self, message_id: str) -> None:
        super().__init__(
            f"No thread state found for message '{message_id}'. Replay the full "
            'conversation with thread: {"type": "create"} to start a new thread.',
            param="thread.previous_message_id",
        )


class ThreadAlreadyContinued(InvalidRequest):
    code = THREAD_ALREADY_CONTINUED

    def __init__(self, message_id: str) -> None:
        super().__init__(
            f"Message '{message_id}' has already been continued, and each message can be "
            "continued only once. Continue from the thread's most recent message id.",
            param="thread.previous_message_id",
        )


class ThreadContinueInFlight(InvalidRequest):
    code = THREAD_CONTINUE_IN_FLIGHT

    def __init__(self, message_id: str, *, generating: bool = False) -> None:
        what = (
            f"Message '{message_id}' is still being generated."
            if generating
            else f"Another request is still continuing from message '{message_id}'."
        )
        super().__init__(
            f"{what} Wait for it to complete and continue from its message id, or replay "
            'the full conversation with thread: {"type": "create"}.',
            param="thread.previous_message_id",
        )
