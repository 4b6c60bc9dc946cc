"""What looking a conversation's item up by id costs SQLite: the same for its last item as
for its first (the id's index, never a walk through the items before it).

SQLite plans without statistics (nothing runs ``ANALYZE``), so an id lookup that also
orders by position may be planned as a walk of the primary key in position order. Its
work is counted in virtual machine instructions (SQLite's progress handler), a count
that does not depend on the machine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine
from sqlalchemy.sql import Executable

from stateway.core.conversations.ports import Conversation
from stateway.storage.sql import SqlConversationStore, migrate, open_store
from stateway.storage.sql import conversation_queries as q
from tests.storage.test_conversations import message

ITEMS = 300
KEY = {"tenant": "t", "conversation": "conv_1"}


@pytest.fixture
async def database(sqlite_url: str) -> AsyncIterator[Connection]:
    """A conversation of ``ITEMS`` items (``msg_0`` ...), written by the store; the
    database opened again without it, to count what each statement costs."""
    await migrate(sqlite_url)
    store = open_store(sqlite_url)
    items = [message(f"m{n}", f"msg_{n}") for n in range(ITEMS)]
    await SqlConversationStore(store).create(Conversation("t", "conv_1", 1.0, {}), items)
    await store.aclose()
    engine = create_engine(sqlite_url)
    with engine.connect() as connection:
        yield connection
    engine.dispose()


@contextmanager
def counted(connection: Connection) -> Iterator[list[int]]:
    """The instructions SQLite runs inside the block, in a list's one element."""
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0  # go on

    driver: Any = connection.connection.driver_connection
    driver.set_progress_handler(step, 1)
    try:
        yield steps
    finally:
        driver.set_progress_handler(None, 1)


def cost(connection: Connection, statement: Executable, values: dict[str, Any]) -> int:
    """Instructions to run ``statement`` again (its first run also reads the schema), once
    it is known to find something."""
    assert connection.execute(statement, values).all() != []
    with counted(connection) as steps:
        connection.execute(statement, values).all()
    return steps[0]


def test_an_item_is_found_by_its_id_at_any_position(database: Connection) -> None:
    first = cost(database, q.SELECT_ITEM, {**KEY, "item": "msg_0"})
    last = cost(database, q.SELECT_ITEM, {**KEY, "item": f"msg_{ITEMS - 1}"})
    assert last == first


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_a_page_after_a_cursor_costs_the_same_at_any_position(
    database: Connection, order: str
) -> None:
    page = q.ITEMS_PAGE[order, True]
    near, far = ("msg_10", f"msg_{ITEMS - 30}")  # each with a whole page after it
    if order == "desc":  # pages run from the end
        near, far = (f"msg_{ITEMS - 10}", "msg_30")
    values = {**KEY, "limit": 21}
    at_near = cost(database, page, {**values, "after": near})
    at_far = cost(database, page, {**values, "after": far})
    assert at_far == at_near
