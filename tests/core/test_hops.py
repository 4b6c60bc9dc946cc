"""The process's Via entry, and telling a request it sent."""

from stateway.core.hops import Hop


def test_a_via_header_naming_this_process_is_its_own() -> None:
    hop = Hop()
    assert hop.sent(hop.via)
    assert hop.sent(f"1.1 nginx, {hop.via}")
    assert hop.sent(f"HTTP/1.1 {hop.pseudonym} (stateway)")


def test_a_via_header_naming_others_is_not() -> None:
    hop = Hop()
    assert not hop.sent("1.1 nginx")
    assert not hop.sent("")
    assert not hop.sent(Hop().via)  # another gateway process
    assert not hop.sent(f"1.1 {hop.pseudonym}x")
    assert not hop.sent(hop.pseudonym)  # no protocol before it: no entry of ours
