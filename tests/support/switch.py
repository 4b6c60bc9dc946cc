"""A loopback port in front of a real server (Redis, PostgreSQL) that can be switched off,
for tests of its outage: while off, it hangs up on the connections open through it and on every new
one, counting those; switched on, it forwards again. Frozen, the connections open through
it fall silent without closing (the server's host died without a word, or a NAT or
firewall between forgot them), while new ones are forwarded. Silenced, new ones are
accepted and fall silent too (a network partition, a frozen host), until switched on."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from urllib.parse import urlsplit


class Switch:
    def __init__(self, url: str) -> None:
        """``url``: the server's (``redis://...``, ``postgresql://...``); :attr:`url` is the
        same through the switch."""
        target = urlsplit(url)
        self._host = target.hostname or "127.0.0.1"
        self._port = target.port or (5432 if target.scheme.startswith("postgres") else 6379)
        self._scheme = target.scheme
        userinfo = target.netloc.rpartition("@")[0]  # user and password, as given
        self._user = f"{userinfo}@" if userinfo else ""
        self._path = target.path
        self._on = True
        self._silent = False
        self._open: set[asyncio.StreamWriter] = set()
        self._refused = 0
        self._refusal = asyncio.Event()
        self._pipes: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> Switch:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{self._scheme}://{self._user}127.0.0.1:{port}{self._path}"
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.off()
        assert self._server is not None
        self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    def off(self) -> None:
        """Hang up on every connection open through the switch, and on later ones."""
        self._on = False
        for writer in list(self._open):
            writer.close()
        self._open.clear()

    def on(self) -> None:
        """Forward new connections again (those frozen or silenced stay silent)."""
        self._on, self._silent = True, False

    def freeze(self) -> None:
        """Stop forwarding on every connection open through the switch, closing none:
        neither side hears anything more on them. Later connections are forwarded."""
        for task in list(self._pipes):
            task.cancel()

    def silence(self) -> None:
        """Freeze, and accept later connections without ever forwarding or answering."""
        self.freeze()
        self._silent = True

    async def refused(self, count: int) -> None:
        """Wait until ``count`` connections were hung up on while off."""
        async with asyncio.timeout(10):
            while self._refused < count:
                self._refusal.clear()
                await self._refusal.wait()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._on:
            writer.close()
            self._refused += 1
            self._refusal.set()
            return
        if self._silent:
            self._open.add(writer)
            self._track(asyncio.create_task(swallow(reader)))
            return
        to_reader, to_writer = await asyncio.open_connection(self._host, self._port)
        self._open |= {writer, to_writer}
        for source, sink in ((reader, to_writer), (to_reader, writer)):
            self._track(asyncio.create_task(pipe(source, sink)))

    def _track(self, task: asyncio.Task[None]) -> None:
        self._pipes.add(task)
        task.add_done_callback(self._pipes.discard)


async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Forward ``source`` to ``sink`` until it ends (then close ``sink``); cancelled, leave
    both open (frozen)."""
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except OSError:
        pass
    sink.close()


async def swallow(source: asyncio.StreamReader) -> None:
    """Read ``source`` until it ends, forwarding nothing, answering nothing."""
    with contextlib.suppress(OSError):
        while await source.read(65536):
            pass
