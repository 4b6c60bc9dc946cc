"""An incremental reader of ``text/event-stream`` bodies from model servers.

It follows the WHATWG event-stream rules that matter upstream: a byte order mark that
starts the stream is skipped; lines end in LF, CRLF or CR (a CR at the end of one chunk
may pair with an LF at the start of the next); ``data:`` lines of one event join with LF;
lines starting with ``:`` are comments; an event is dispatched at a blank line, unless its
data is empty; an unterminated event at end of stream is dropped.

One field the rules would ignore is read: ``error``, as ``event: error`` with its value for
data. llama.cpp's servers before late 2025 wrote a failure mid-stream so
(``error: {...}``, then ``data: [DONE]``; ggml-org/llama.cpp#16109): dropped, the stream
would end as if answered.
"""

from __future__ import annotations

from stateway.core.immutable import immutable


@immutable
class ServerSentEvent:
    event: str | None
    data: bytes


_BOM = b"\xef\xbb\xbf"


class SSEDecoder:
    __slots__ = ("_buffer", "_data", "_event", "_fresh")

    def __init__(self) -> None:
        self._buffer = b""
        self._event: str | None = None
        self._data: list[bytes] = []
        self._fresh = True
        """Nothing read yet: a byte order mark would be skipped."""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        if self._fresh:
            head = self._buffer + chunk
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._buffer = head  # maybe a mark split across chunks
                return []
            self._fresh, self._buffer = False, b""
            chunk = head.removeprefix(_BOM)
        end = len(chunk) - 2
        if (  # the common case, one token's chunk: "data: {...}\n\n" and nothing else
            end > 6  # "data: \n\n" has no data: not dispatched
            and not self._buffer
            and not self._data
            and chunk.startswith(b"data: ")
            and chunk.find(b"\n", 6) == end  # its first line break ends its one line,
            and chunk[-1] == 0x0A  # and a blank line follows (no count over the whole chunk)
            and b"\r" not in chunk
        ):
            event, self._event = self._event, None
            return [ServerSentEvent(event, chunk[6:end])]
        buffer = self._buffer + chunk if self._buffer else chunk
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buffer.split(b"\n")
        self._buffer = lines.pop() + held
        dispatched: list[ServerSentEvent] = []
        for line in lines:
            if not line:
                data = b"\n".join(self._data)
                if data:  # ``data:`` alone is no data (two of them are a line break)
                    dispatched.append(ServerSentEvent(self._event, data))
                self._event, self._data = None, []
                continue
            self._field(line)
        return dispatched

    def close(self) -> list[ServerSentEvent]:
        """End of stream: a held CR still ends its line; a partial event is dropped."""
        return self.feed(b"\n") if self._buffer.endswith(b"\r") else []

    def _field(self, line: bytes) -> None:
        if line[0] == 0x3A:  # ":" comment
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"error":  # llama.cpp's (module docstring)
            self._event = "error"
            self._data.append(value)
