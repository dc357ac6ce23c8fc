"""Values from an announcement on the run page: each attack an emitter could
post as a dataset URI or event id renders as its own text, checked with a CommonMark parser
with GFM tables (markdown-it-py, installed with Prefect's rich) on the very markdown the
artifacts publish."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from markdown_it import MarkdownIt

from flows.announcements.model import Announcement, RunAnnouncement
from flows.runpage.artifacts import announcement_markdown
from flows.runpage.live import output_markdown, uri_markdown
from flows.runpage.markdown_text import md_code, md_text

ATTACKS = [
    "gs://b/x.parquet](https://evil.example/phish)",
    "gs://b/![pixel](https://evil.example/track.png)",
    "gs://b/[click here](javascript:alert(1))",
    "gs://b/<img src=x onerror=alert(1)>",
    "gs://b/<https://evil.example>",
    "gs://b/a|b|c|d|e",
    "gs://b/`x` [l](https://evil.example) `y`",
    "gs://b/x\n\n# heading\n[l]: https://evil.example",
    "gs://b/[l]",
]
PARSER = MarkdownIt("commonmark").enable("table")


def _html(markdown: str) -> str:
    return PARSER.render(markdown)


@pytest.mark.parametrize("value", ATTACKS)
def test_an_announced_value_in_the_announcement_table_is_only_text(value):
    item = Announcement("dataset", value, "evt-1", datetime(2025, 6, 1, tzinfo=UTC))
    html = _html(announcement_markdown(RunAnnouncement({"dataset": item}, (item,))))
    assert "<a " not in html and "<img" not in html and "<h1" not in html, html
    rows = [line for line in html.splitlines() if line.startswith("<tr>")]
    assert all(row.count("<td>") in (0, 4) for row in rows), html  # no extra cell
    assert html.count("<td>") == 8, html


@pytest.mark.parametrize("value", ATTACKS)
def test_an_output_uri_makes_at_most_its_own_console_link(value):
    for markdown in (uri_markdown(value), output_markdown("hf_export", value, "local runs"),
                     md_code(value), md_text(value)):
        html = _html(markdown)
        assert "<img" not in html and "<h1" not in html, html
        links = [part.split('"', 1)[0] for part in html.split('<a href="')[1:]]
        assert all(link.startswith("https://console.cloud.google.com/") for link in links), html
        assert "evil.example/phish)" not in "".join(links)


def test_plain_values_read_as_themselves():
    assert _html(md_text("gs://b/d/v3.parquet")).strip() == "<p>gs://b/d/v3.parquet</p>"
    assert _html(md_code("a`b")).strip() == "<p><code>a`b</code></p>"
