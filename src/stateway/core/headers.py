"""What an HTTP header the gateway sends may hold (RFC 9110): a name that is a token, a
value of printable ASCII and tabs. A line break would end the header and start another;
a name that is no token, or a value outside ASCII, fails the request when it is sent."""

from __future__ import annotations

import re
from typing import Final

_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE: Final = re.compile(r"[\t\x20-\x7e]*")


def is_header_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def is_header_value(value: str) -> bool:
    return _VALUE.fullmatch(value) is not None
