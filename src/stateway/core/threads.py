"""Messages threads: server-held conversation state, kept as a conversation.

A thread is a conversation (ADR 0017) whose turns are Messages responses, each stored.
``thread: {"type": "create"}`` makes a new conversation, and the response its first
turn; ``{"type": "continue", "previous_message_id": ...}`` runs a turn of the
conversation of the response it names, with the conversation's items (every earlier
turn's input and output) as the context before the request's new turn. So a thread gets
what conversations already give, on SQLite and PostgreSQL alike, scoped by tenant:

- **continued once**: a turn may continue only from the conversation's latest turn (the
  one that appended its items last, :attr:`ConversationItems.last_response_id`); from
  an earlier one it is ``thread_already_continued``. A turn that failed or was cancelled
  appends nothing, so the turn before it is still the latest: the client continues from
  it again. So does a turn its client left (``incomplete``, ``client_disconnected``): a
  client that timed out, or left a stream before its ``message_start``, never saw its id.
- **in flight**: a turn takes the conversation with its in-progress row (ADR 0006), so a
  second continue from the same message is refused its claim, answered
  ``thread_continue_in_flight``, as is a continue from a response still generating.
- **not found**: a message unknown to the tenant (another's, deleted, never stored: a
  plain Messages request), made outside a thread, or whose turn appended nothing
  (failed, cancelled, left by its client) is ``thread_not_found``; so is a thread whose
  conversation was deleted through the Conversations API.

What a thread holds besides its items: its system and its tools. The system is not
appended to the conversation (a turn that sends another one replaces it, as Claude Code
may, rather than adding a second system message mid-context): each turn's response
stores the system that led its context (``thread_system``), which a continue without
``system`` inherits. A continue that declares no tools (Claude Code sends none) is offered
the previous turn's, as stored with its response (the tools in effect at its end: its
mid-conversation tool changes applied), with its own changes applied to them; one that
declares tools replaces them (the changes of earlier turns with them).
An MCP connector server's authorization is never stored (``SECRET_KEYS`` in
:mod:`stateway.core.tools.mcp_binding`), so a continue of a thread with MCP servers sends
them again.

A continue sending no messages goes on from its previous turn, which must have handed
itself back unfinished (``pause_turn``: stored ``incomplete``, ``max_rounds``; or
``compaction``: stopped after its compaction block), as the SDK's thread helper and tool
runner resume one; after a turn that ended otherwise it has nothing to answer (a 400).

A Messages compaction in a thread (a ``compaction`` request, the ``compact_20260112``
edit, or a block sent back) summarizes every message before it, the user's included:
later turns see the thread's system, that summary and what follows it
(:func:`thread_items`), as a client sending the block back would have them.

A prewarm (``max_tokens: 0``) is no turn: it is checked as its turn would be (a continue
from a message that is not the latest is ``thread_already_continued``) and answered, but
it is not stored, holds nothing and takes no claim, so the turn it warms, sent next from
the same message, is not refused; a prewarm's create makes no conversation. A count of a
turn's input tokens (:meth:`Threads.count`) is read the same way, and refused alike.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from stateway.core.commands import CreateResponse, ThreadTurn
from stateway.core.compaction.sealed import COMPACTION
from stateway.core.compaction.view import standalone
from stateway.core.conversations.commands import CreateConversation, DeleteConversation
from stateway.core.conversations.ports import Conversation, ConversationItems
from stateway.core.conversations.service import Conversations
from stateway.core.errors import (
    ConversationLocked,
    ConversationNotFound,
    InvalidRequest,
    ThreadAlreadyContinued,
    ThreadContinueInFlight,
    ThreadNotFound,
)
from stateway.core.items import Item
from stateway.core.ports import ResponseRecord, ResponseStore
from stateway.core.response import (
    APPENDED_ENDINGS,
    MAX_ROUNDS_REASON,
    UNFINISHED,
    thread_left,
)
from stateway.core.results import TokenCount
from stateway.core.runs import Run
from stateway.core.tools.changes import tools_in_effect
from stateway.core.tools.toolset import MCP

log = logging.getLogger(__name__)

MESSAGE_PREFIX = "msg_"
RESPONSE_PREFIX = "resp_"


class Threads:
    def __init__(self, store: ResponseStore, conversations: Callable[[str], Conversations]) -> None:
        """``conversations(param)``: the conversations served, or a 404 naming ``param``."""
        self._store = store
        self._conversations = conversations

    async def resolve(self, tenant_id: str, command: CreateResponse) -> None:
        """Make ``command`` a turn of its thread's conversation (a new one for a create),
        with the system and tools it inherits. Raises the thread's refusals."""
        thread = command.thread
        assert thread is not None
        previous = thread.previous_response_id
        if not command.generate:  # a prewarm: read, never held (the module's doc)
            command.store = False
        if previous is None:
            if not command.store:
                thread.system = thread.system or []
                return
            conversations = self._conversations("thread")
            made = await conversations.execute(tenant_id, CreateConversation())
            assert isinstance(made, Conversation)
            command.conversation_id = made.id
            thread.system = thread.system or []
            return
        record = await self._store.get(tenant_id, previous)
        body = record.body if record is not None else {}
        if record is None or body.get("thread_system") is None:
            raise ThreadNotFound(message_id(previous))
        if record.status in UNFINISHED:
            raise ThreadContinueInFlight(message_id(previous), generating=True)
        left = thread_left(body["thread_system"], body.get("incomplete_reason"))
        appended = record.status in APPENDED_ENDINGS and not left
        if not appended or body.get("conversation_id") is None:
            raise ThreadNotFound(message_id(previous))
        if thread.resumes and not _paused(record):
            raise InvalidRequest(
                "messages: at least one message is required (a continue without any "
                f"goes on from a paused turn, and {message_id(previous)} was not paused: "
                "its stop_reason was neither pause_turn nor compaction).",
                param="messages",
                code="missing_required_parameter",
            )
        command.conversation_id = body["conversation_id"]
        if thread.system is None:
            thread.system = body["thread_system"]
        if not thread.tools_given:
            inherited = _inherited(body.get("settings", {}).get("tools") or [])
            command.settings.tools = tools_in_effect(inherited, thread.tool_changes)

    async def turn(
        self, tenant_id: str, command: CreateResponse, admit: Callable[[], Awaitable[Run]]
    ) -> Run:
        """``command``'s run, a turn of its thread (:meth:`resolve`) that ``admit`` admits;
        refused in the thread's words, and a create refused leaves no conversation."""
        with _thread_refusals(command.thread):
            await self.resolve(tenant_id, command)
            try:
                return await admit()
            except Exception:
                await self._refused(tenant_id, command)
                raise

    async def count(
        self,
        tenant_id: str,
        command: CreateResponse,
        count: Callable[[], Awaitable[TokenCount]],
    ) -> TokenCount:
        """``count`` of ``command``, a turn of its thread (:meth:`resolve`): what the turn
        would send, the thread's system, tools and items included, refused in the
        thread's words as the turn would be. A count holds and makes nothing: a create's
        makes no conversation."""
        command.store = False
        with _thread_refusals(command.thread):
            await self.resolve(tenant_id, command)
            return await count()

    async def _refused(self, tenant_id: str, command: CreateResponse) -> None:
        """A thread's first turn was refused before it began (an unknown model, an
        overloaded route, a bad request): the conversation made for it is deleted, as
        nothing names it. Best effort: a failure to delete is only logged."""
        thread = command.thread
        if thread is None or thread.previous_response_id is not None:
            return
        if command.conversation_id is None:  # a prewarm's: none was made
            return
        try:
            conversations = self._conversations("thread")
            await conversations.execute(tenant_id, DeleteConversation(command.conversation_id))
        except Exception:  # the refusal is what the client is told
            log.warning("deleting the conversation of a refused thread failed", exc_info=True)


def thread_items(items: list[Item], current: list[Item]) -> list[Item]:
    """A thread's stored ``items`` as a turn with input ``current`` continues them: from
    the last Messages compaction among them (one showing its summary: it stands for every
    message before it, the user's included, as its block sent back in their place would),
    or none when ``current`` brings such a block itself."""
    if any(standalone(item) for item in current):
        return []
    last = next((i for i in range(len(items) - 1, -1, -1) if standalone(items[i])), 0)
    return items[last:]


def check_continued(thread: ThreadTurn, conversation: ConversationItems) -> None:
    """Refuse a continue from a turn that is not its thread's latest (read with the
    context the turn runs on)."""
    previous = thread.previous_response_id
    if previous is not None and conversation.last_response_id != previous:
        raise ThreadAlreadyContinued(message_id(previous))


@contextmanager
def _thread_refusals(thread: ThreadTurn | None) -> Iterator[None]:
    """A thread's turn refused its conversation, in the thread's words: held by another
    turn (a concurrent continue from the same message), or gone (deleted)."""
    if thread is None or thread.previous_response_id is None:
        yield
        return
    named = message_id(thread.previous_response_id)
    try:
        yield
    except ConversationLocked:
        raise ThreadContinueInFlight(named) from None
    except ConversationNotFound:
        raise ThreadNotFound(named) from None


def _paused(record: ResponseRecord) -> bool:
    """Whether a turn handed itself back unfinished, to go on from a continue sending
    nothing new: ``pause_turn`` (its upstream's tool loop paused, or the gateway's tool
    rounds ran out), or ``compaction`` (it stopped after its compaction block: a
    compaction request's, or ``pause_after_compaction``'s)."""
    if record.status == "incomplete":
        return record.body.get("incomplete_reason") == MAX_ROUNDS_REASON
    last = record.output_items[-1] if record.output_items else {}
    return record.status == "completed" and last.get("type") == COMPACTION


def _inherited(tools: list[Item]) -> list[Item]:
    if any(tool.get("type") == MCP for tool in tools):
        raise InvalidRequest(
            "mcp_servers: this thread's MCP servers must be sent again (with its tools) on "
            "every continue: the gateway does not keep their authorization.",
            param="mcp_servers",
            code="missing_required_parameter",
        )
    return tools


def message_id(response_id: str) -> str:
    """A response's id as the Messages wire shows it (``resp_X`` -> ``msg_X``)."""
    return MESSAGE_PREFIX + response_id.removeprefix(RESPONSE_PREFIX)


def response_id(message: str) -> str | None:
    """The response a message id names (``msg_X`` -> ``resp_X``); None for another id."""
    if not message.startswith(MESSAGE_PREFIX) or len(message) == len(MESSAGE_PREFIX):
        return None
    return RESPONSE_PREFIX + message.removeprefix(MESSAGE_PREFIX)
