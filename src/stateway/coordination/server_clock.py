"""The clock the limits' Redis scripts read: the Redis server's own (``TIME``), shared by
every replica, unless the caller passes seconds of its own (tests drive time so)."""

from __future__ import annotations


def lua_now(argument: int) -> str:
    """Lua setting ``now`` (seconds, fractional) from ``ARGV[argument]``, or from the
    server's ``TIME`` when that is ``''``."""
    return f"""
local now
if ARGV[{argument}] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
else
  now = tonumber(ARGV[{argument}])
end
"""
