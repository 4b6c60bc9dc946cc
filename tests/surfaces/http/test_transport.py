"""A client going away while its answer is made (:mod:`stateway.surfaces.http.transport`):
noticed only once the answer has taken a while, turned into a cancel of the task answering
it (or into a call), and told apart from a cancel of anyone else's."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import ClientDisconnect
from starlette.types import Message

from stateway.surfaces.http.transport import DisconnectWatch, watch_disconnect, while_present


class Client:
    """A client's ``receive``: what is left of its body, then the disconnect once it
    leaves; counts the calls."""

    def __init__(self, *messages: Message) -> None:
        self.messages = list(messages)
        self.gone = asyncio.Event()
        self.calls = 0

    async def receive(self) -> Message:
        self.calls += 1
        if self.messages:
            return self.messages.pop(0)
        await self.gone.wait()
        return {"type": "http.disconnect"}


async def test_only_the_disconnect_is_reported_once() -> None:
    client = Client({"type": "http.request", "body": b"", "more_body": False})
    reported: list[None] = []
    watching = asyncio.create_task(watch_disconnect(client.receive, lambda: reported.append(None)))
    await asyncio.sleep(0.01)
    assert reported == []
    client.gone.set()
    await asyncio.wait_for(watching, 5)
    assert reported == [None]


async def test_a_client_leaving_cancels_the_answer_once_it_has_taken_a_while() -> None:
    """An answer done within the watch's first interval never reads the client: a
    client already gone then is noticed only after it."""
    client = Client()
    client.gone.set()  # gone from the start

    async def answer() -> str:
        watch = DisconnectWatch(client.receive, 0.05)
        try:
            await asyncio.sleep(0.01)
            assert client.calls == 0  # nothing read yet: a timer, no task
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            assert watch.left()
            return "left"
        finally:
            assert watch.stop()
        return "answered"

    assert await asyncio.wait_for(answer(), 5) == "left"


async def test_an_answer_done_before_the_client_leaves_is_not_cancelled() -> None:
    client = Client()

    async def answer() -> str:
        watch = DisconnectWatch(client.receive, 0.001)
        await asyncio.sleep(0.02)  # the watcher task reads the client by now
        gone = watch.stop()
        client.gone.set()  # leaves after the answer: nobody watches any more
        await asyncio.sleep(0.01)
        return f"answered, left: {gone}"

    assert await asyncio.wait_for(answer(), 5) == "answered, left: False"
    assert client.calls == 1


async def test_a_cancel_of_anyone_else_is_not_the_clients() -> None:
    """A task cancelled by its server (a shutdown) while its client is still there:
    ``left`` says no, and ``while_present`` lets the cancel through."""
    client = Client()
    started = asyncio.Event()

    async def answer() -> None:
        started.set()
        await asyncio.sleep(10)

    answering = asyncio.create_task(while_present(client.receive, answer()))
    await started.wait()
    await asyncio.sleep(0.1)  # watched by now
    answering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await answering


async def test_a_client_leaving_a_model_call_is_a_client_disconnect() -> None:
    """``while_present``: the awaited call is cancelled (its upstream request closed) and
    the request ends as a client gone, nobody to answer."""
    client = Client()
    cancelled = asyncio.Event()

    async def answer() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    answering = asyncio.create_task(while_present(client.receive, answer()))
    await asyncio.sleep(0.1)
    client.gone.set()
    with pytest.raises(ClientDisconnect):
        await asyncio.wait_for(answering, 5)
    assert cancelled.is_set()


async def test_a_watch_given_a_call_makes_it_instead_of_cancelling() -> None:
    """An attached run's cancel is called in place of the task's (it knows when a cancel
    may interrupt it); ``stop`` then tells the client left."""
    client = Client()
    called: list[str] = []

    async def answer() -> bool:
        watch = DisconnectWatch(client.receive, 0.001, leave=lambda: called.append("first"))
        watch.calling(lambda: called.append("run.cancel"))
        client.gone.set()
        await asyncio.sleep(0.05)  # not cancelled
        return watch.stop()

    assert await asyncio.wait_for(answer(), 5) is True
    assert called == ["run.cancel"]
