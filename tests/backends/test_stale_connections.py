"""A pooled keep-alive connection the upstream has just closed: the request that hits it is
sent once more, on a fresh connection; nothing else is ever sent twice.

The server here answers the first request on each connection (keeping it alive) and, like
an upstream whose keep-alive ran out just as the request arrived, closes the connection on
any later request without answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from stateway.backends import upstream_http
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import UpstreamError

_OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class OneShotConnections:
    """Counts connections and requests; answers only the first request per connection."""

    def __init__(self, *, answer_first: bool = True, hold_first_until: int = 0) -> None:
        self.answer_first = answer_first
        self.hold_first_until = hold_first_until
        """Delay first answers until this many connections are open (forces a pool)."""
        self.connections = 0
        self.requests = 0
        self._opened = asyncio.Condition()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._opened:
            self.connections += 1
            self._opened.notify_all()
        answered = 0
        try:
            while await _read_request(reader):
                self.requests += 1
                if answered or not self.answer_first:
                    break  # stale: close without a byte of response
                async with asyncio.timeout(5), self._opened:
                    await self._opened.wait_for(lambda: self.connections >= self.hold_first_until)
                writer.write(_OK)
                await writer.drain()
                answered += 1
        finally:
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> bool:
    """Read one request (headers and Content-Length body); False at end of stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return False
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return True


@pytest.fixture
async def started() -> AsyncIterator[list[asyncio.Server]]:
    servers: list[asyncio.Server] = []
    yield servers
    for server in servers:
        server.close()


async def serve(script: OneShotConnections, servers: list[asyncio.Server]) -> str:
    server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    servers.append(server)
    port = server.sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def post(client: UpstreamClient) -> bytes:
    async with client.post("/chat/completions", {"model": "m"}) as reply:
        return await reply.read()


async def test_a_stale_reused_connection_is_retried_on_a_fresh_one(
    started: list[asyncio.Server],
) -> None:
    script = OneShotConnections(hold_first_until=3)
    client = UpstreamClient(UpstreamTarget("up", await serve(script, started)))
    # Three calls at once leave three pooled connections, each of them stale from now on.
    assert await asyncio.gather(post(client), post(client), post(client)) == [b"{}"] * 3
    assert (script.connections, script.requests) == (3, 3)

    assert await post(client) == b"{}"
    # One stale pooled connection tried, then a new one (not another stale one from the pool).
    assert (script.connections, script.requests) == (4, 5)
    await client.aclose()


async def test_a_call_has_all_of_total_timeout_and_its_retry_what_is_left(
    started: list[asyncio.Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call's first attempt waits for its headers within all of ``total_timeout``,
    a retry on a fresh connection within what is left of it (the body then within what
    is left after the headers: :func:`~stateway.backends.upstream_http._overdue`). aiohttp
    is sent its client's one ``ClientTimeout``, of ``connect_timeout`` alone: one made per
    call cost ~8,600 CPU instructions, and its whole-call timer ~2% of a relayed request."""
    sent: list[aiohttp.ClientTimeout] = []
    send = aiohttp.ClientSession._request

    async def spied(
        session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any
    ) -> aiohttp.ClientResponse:
        sent.append(kwargs["timeout"])
        return await send(session, method, url, **kwargs)

    waits: list[float | None] = []

    class Waits(upstream_http.Deadline):
        def __init__(self, seconds: float | None) -> None:
            waits.append(seconds)
            super().__init__(seconds)

    monkeypatch.setattr(aiohttp.ClientSession, "_request", spied)
    monkeypatch.setattr(upstream_http, "Deadline", Waits)
    script = OneShotConnections(hold_first_until=3)
    target = UpstreamTarget("up", await serve(script, started), total_timeout=60.0)
    client = UpstreamClient(target)
    assert await asyncio.gather(post(client), post(client), post(client)) == [b"{}"] * 3
    assert await post(client) == b"{}"  # a stale pooled connection, then a fresh one
    await client.aclose()
    assert len(sent) == 5
    assert all(timeout is sent[0] for timeout in sent)
    assert (sent[0].total, sent[0].connect, sent[0].sock_read) == (
        None,
        target.connect_timeout,
        None,
    )
    *firsts, retry = waits
    assert firsts == [60.0] * 4
    assert retry is not None
    assert 59.0 < retry < 60.0


async def test_a_failure_on_a_new_connection_is_not_retried(
    started: list[asyncio.Server],
) -> None:
    script = OneShotConnections(answer_first=False)
    client = UpstreamClient(UpstreamTarget("up", await serve(script, started)))
    with pytest.raises(UpstreamError) as failed:
        await post(client)
    assert failed.value.message == "The model server 'up' closed the connection."
    assert script.requests == 1
    await client.aclose()


async def answer_with(reply: bytes, *, reset: bool = False) -> tuple[asyncio.Server, str]:
    """A server that reads one request, writes ``reply`` and closes (with a TCP reset)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(reply)
        await writer.drain()
        if reset:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


@pytest.mark.parametrize(
    ("reply", "reset", "words"),
    [
        (b"", True, "reset the connection"),
        (b"SMTP ready\r\n\r\n", False, "sent an answer that is not HTTP"),
    ],
)
async def test_a_broken_connection_is_told_in_words_not_a_class_name(
    started: list[asyncio.Server], reply: bytes, reset: bool, words: str
) -> None:
    server, url = await answer_with(reply, reset=reset)
    started.append(server)
    client = UpstreamClient(UpstreamTarget("up", url))
    with pytest.raises(UpstreamError) as failed:
        await post(client)
    assert failed.value.message == f"The model server 'up' {words}."
    await client.aclose()


async def test_a_certificate_not_verified_is_told_not_to_retry(
    started: list[asyncio.Server], tmp_path: Path
) -> None:
    """A model server whose TLS certificate does not verify (self-signed here) is a
    configuration to fix (its CA, its URL): the same request would fail again, so the
    answer says not to retry (the SDKs retry a 502 by themselves)."""
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    server = await asyncio.start_server(_read_request_only, "127.0.0.1", 0, ssl=tls)
    started.append(server)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    client = UpstreamClient(UpstreamTarget("up", url))
    with pytest.raises(UpstreamError) as failed:
        await post(client)
    await client.aclose()
    assert failed.value.message == (
        "The model server 'up' presented a TLS certificate that could not be verified."
    )
    assert failed.value.headers == {"x-should-retry": "false"}


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key: the files of both."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def _read_request_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        await reader.read(1)
    writer.close()
