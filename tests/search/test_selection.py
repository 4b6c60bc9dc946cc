"""What every provider does to its hits: http(s) only, allowed domains, each URL once."""

from __future__ import annotations

import pytest

from stateway.core.tools.ports import SearchHit, SearchQuery, ToolFailure
from stateway.search.selection import (
    MAX_SNIPPET_CHARS,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
    content_results,
    host_allowed,
    normalize_domains,
    select_hits,
)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("example.com", True),
        ("docs.example.com", True),
        ("a.b.example.com", True),
        ("EXAMPLE.com.", True),
        ("notexample.com", False),
        ("example.com.evil.net", False),
        ("example.org", False),
        ("", False),
    ],
)
def test_a_domain_allows_itself_and_its_subdomains(host: str, allowed: bool) -> None:
    assert host_allowed(host, ("example.com",)) is allowed


def test_domains_are_read_leniently() -> None:
    raw = ["https://Docs.Example.com/path", "*.example.org", " .example.net. ", "", "a.io/x"]
    assert normalize_domains(raw) == ("docs.example.com", "example.org", "example.net", "a.io")


def test_an_allow_list_naming_no_domain_allows_none() -> None:
    hits = [SearchHit("a", "https://example.com/1")]
    assert select_hits(hits, SearchQuery("q", allowed_domains=("", "*.")), limit=5) == []
    assert len(select_hits(hits, SearchQuery("q", blocked_domains=("",)), limit=5)) == 1


def test_duplicates_differ_only_by_fragment_case_or_trailing_slash() -> None:
    hits = [
        SearchHit("a", "https://example.com/page"),
        SearchHit("b", "HTTPS://EXAMPLE.com/page/"),
        SearchHit("c", "https://example.com/page#part"),
        SearchHit("d", "https://example.com/Page"),  # paths are case-sensitive
        SearchHit("e", "https://example.com/pageX"),
    ]
    chosen = select_hits(hits, SearchQuery("q", max_results=10), limit=10)
    assert [hit.title for hit in chosen] == ["a", "d", "e"]


def test_only_absolute_http_urls_are_kept() -> None:
    hits = [
        SearchHit("js", "javascript:alert(1)"),
        SearchHit("rel", "/relative"),
        SearchHit("ftp", "ftp://example.com/f"),
        SearchHit("bad", "http://[::1"),
        SearchHit("ok", "http://example.com/"),
    ]
    assert [h.title for h in select_hits(hits, SearchQuery("q"), limit=5)] == ["ok"]


def test_the_smaller_of_the_two_limits_applies_after_filtering() -> None:
    hits = [SearchHit(str(i), f"https://{host}/{i}") for i, host in enumerate("abab")]
    query = SearchQuery("q", max_results=3, allowed_domains=("b",))
    assert [h.title for h in select_hits(hits, query, limit=1)] == ["1"]
    assert [h.title for h in select_hits(hits, query, limit=5)] == ["1", "3"]


def test_a_url_is_given_without_the_blanks_around_it() -> None:
    """A provider's `" https://a.example/x "` is kept as the URL it is compared as: the
    model cites it and the client opens it (a citation of the padded one never matches)."""
    hits = [SearchHit("a", " https://a.example/x\n"), SearchHit("b", "https://a.example/x")]
    query = SearchQuery("q", allowed_domains=("a.example",))
    assert select_hits(hits, query, limit=5) == [SearchHit("a", "https://a.example/x")]


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://example.com/blog", True),
        ("https://example.com/blog/", True),
        ("https://example.com/blog/post?id=1", True),
        ("https://docs.example.com/blog/post", True),
        ("https://example.com/blogger", False),
        ("https://example.com/", False),
        ("https://example.com/other/blog", False),
        ("https://example.org/blog", False),
    ],
)
def test_a_domain_with_a_path_names_the_pages_under_it(url: str, allowed: bool) -> None:
    """``example.com/blog`` (Anthropic's filters take subpaths) allows, or blocks, that
    path on the domain and its subdomains: not the whole site."""
    hits = [SearchHit("a", url)]
    for entry in ("example.com/blog", "https://Example.com/blog/", "*.example.com/blog/*"):
        kept = select_hits(hits, SearchQuery("q", allowed_domains=(entry,)), limit=5)
        assert bool(kept) is allowed, entry
        left = select_hits(hits, SearchQuery("q", blocked_domains=(entry,)), limit=5)
        assert bool(left) is not allowed, entry


def test_results_without_a_url_are_skipped_and_missing_texts_are_empty() -> None:
    """The SearXNG and Tavily shape: ``results[]`` of ``title``, ``url`` and ``content``; a
    title or content that is absent or not a string is empty, not an error."""
    answer = {
        "results": [
            {"title": "no url", "content": "x"},
            {"title": "not a string", "url": 3},
            "not an object",
            {"url": "https://a.example/1", "title": None, "content": 5},
            {"url": "https://a.example/2", "title": " A ", "content": " about a\n"},
        ]
    }
    assert content_results(answer, "SearXNG") == [
        SearchHit("", "https://a.example/1", ""),
        SearchHit("A", "https://a.example/2", "about a"),
    ]


@pytest.mark.parametrize("answer", [[], "results", None, {"results": {}}, {}])
def test_an_answer_without_a_results_list_fails_naming_the_provider(answer: object) -> None:
    with pytest.raises(ToolFailure) as caught:
        content_results(answer, "Tavily")
    assert caught.value.message == "Tavily returned an unexpected answer (no results list)"


def test_a_hits_text_is_clipped_and_an_overlong_url_skipped() -> None:
    """A provider's answer is capped as a whole (4 MiB), not per hit: one title or snippet
    could otherwise fill the model's context and the stored item. A URL is never cut (it
    would name another page): a hit whose URL no browser takes is left out."""
    long_url = "https://example.com/" + "p" * MAX_URL_CHARS
    hits = [
        SearchHit("t" * 100_000, long_url, "s" * 100_000),
        SearchHit("t" * 100_000, "https://example.com/ok", "s" * 100_000),
    ]

    [hit] = select_hits(hits, SearchQuery("q"), limit=5)

    assert hit == SearchHit(
        "t" * MAX_TITLE_CHARS, "https://example.com/ok", "s" * MAX_SNIPPET_CHARS
    )
