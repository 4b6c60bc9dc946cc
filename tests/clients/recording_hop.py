"""A recording HTTP hop between a real client and the gateway: what the client really sent.

``python recording_hop.py TARGET LOG`` listens on a free loopback port, prints
``recording hop listening on http://127.0.0.1:PORT``, forwards every request to ``TARGET``
(``http://HOST:PORT``) and appends one JSON line per request to ``LOG``:
``{"method", "path", "headers", "body", "status"}`` (header names lower-cased, the body
parsed as JSON or null, the status of the answer; the line is written when the answer's
headers arrive, with ``status`` null if none came). Answers are relayed as
they arrive (SSE included) and end by closing the connection, which is all a client needs;
each answered request's body as relayed (whole, or as far as its client read) is appended
to ``LOG.answers`` (one JSON string a line) once relayed: after its client may have read it
all and gone on, so a reader waits for it (``OfflineGateway.answers_since``).
A WebSocket upgrade is recorded the same way (``status`` 101 once accepted), then its
bytes are relayed both ways untouched until either side closes.

Only the standard library, so it runs under any Python, in any network namespace.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

ANNOUNCEMENT = "recording hop listening on "
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
)


class _Hop(BaseHTTPRequestHandler):
    target: tuple[str, int]
    log_path: str
    log_lock = threading.Lock()

    def do_GET(self) -> None:
        if self.headers.get("upgrade", "").lower() == "websocket":
            self._tunnel()
        else:
            self._forward()

    def do_POST(self) -> None:
        self._forward()

    def do_DELETE(self) -> None:
        self._forward()

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        upstream = http.client.HTTPConnection(*self.target, timeout=120)
        status: int | None = None
        got: list[bytes] = []
        try:
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            status = answer.status
            self._record(body, status)
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in _HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("connection", "close")
            self.end_headers()
            while chunk := answer.read1(65536):
                got.append(chunk)
                self.wfile.write(chunk)
                self.wfile.flush()
        finally:
            if status is None:
                self._record(body, None)
            else:  # as far as it was relayed
                with self.log_lock, open(self.log_path + ".answers", "a", encoding="utf-8") as log:
                    log.write(json.dumps(b"".join(got).decode("utf-8", "replace")) + "\n")
            upstream.close()
        self.close_connection = True

    def _tunnel(self) -> None:
        """Relay a WebSocket upgrade and then its frames, both ways, as bytes."""
        upstream = socket.create_connection(self.target, timeout=120)
        lines = [f"{self.command} {self.path} HTTP/1.1"]
        lines += [f"{key}: {value}" for key, value in self.headers.items()]
        upstream.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        reply = upstream.recv(65536)
        parts = reply.split(b" ", 2)
        status = int(parts[1]) if reply.startswith(b"HTTP/") and len(parts) > 1 else None
        self._record(b"", status)
        self.connection.sendall(reply)
        back = threading.Thread(target=_relay, args=(upstream, self.connection), daemon=True)
        back.start()
        _relay(self.connection, upstream)
        back.join()
        upstream.close()
        self.close_connection = True

    def _record(self, body: bytes, status: int | None) -> None:
        parsed: Any
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        headers = {key.lower(): value for key, value in self.headers.items()}
        line = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "headers": headers,
                "body": parsed,
                "status": status,
            }
        )
        with self.log_lock, open(self.log_path, "a", encoding="utf-8") as log:
            log.write(line + "\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log


def _relay(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def main(target: str, log_path: str) -> None:
    parts = urlsplit(target)
    _Hop.target = (parts.hostname or "127.0.0.1", parts.port or 80)
    _Hop.log_path = log_path
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hop)
    server.daemon_threads = True
    print(f"{ANNOUNCEMENT}http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
