"""render.py: a model's Markdown reply as the sanitised HTML a chat or mail client shows. The
reply is hostile input: whatever it holds, nothing in the HTML can run, load or point anywhere
but an http(s)/mailto/ftp/magnet link."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from hermes_fs.service.gateway.render import TAGS, html_document, render, sanitise


def test_markdown_becomes_the_tags_a_client_shows():
    r = render("# Title\n\n- **bold** and *em* and ~~old~~\n- `code`\n\n| a | b |\n|--:|---|\n| 1 | 2 |\n\n> quoted")
    assert not r.plain
    for piece in ("<h1>Title</h1>", "<strong>bold</strong>", "<em>em</em>", "<s>old</s>", "<code>code</code>",
                  "<table>", "<th>a</th>", "<td>1</td>", "<blockquote>"):
        assert piece in r.html, piece
    assert "style=" not in r.html  # table alignment styles are not in the allowed set


def test_a_plain_sentence_is_plain_and_lines_stay_lines():
    assert render("just words, \"quoted\" & <b>").plain
    two = render("first line\nsecond line")
    assert two.plain and "first line<br>" in two.html


HOSTILE = [
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<iframe src=https://e.vil></iframe>",
    "[x](javascript:alert(1))", "[x](JaVaScRiPt:alert(1))", "[x](data:text/html;base64,PHNjcmlwdD4=)",
    "[x](vbscript:msgbox)", "[x](/relative/path)", "![x](https://tracker.example/p.png)",
    '```" onmouseover="alert(1)\ncode\n```', '<a href="https://ok.example" onclick="x()">a</a>',
    "<style>body{display:none}</style>", "[x](<java\nscript:alert(1)>)", "[x](&#106;avascript:alert(1))",
]


class Elements(HTMLParser):
    """Every element and attribute of an HTML fragment, as a browser's parser sees them."""

    def __init__(self, text: str):
        super().__init__()
        self.seen: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.seen.append((tag, attrs))


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_replies_render_to_nothing_that_runs_or_loads(hostile):
    html = render(hostile).html  # raw HTML in a reply is shown as text (&lt;script&gt;), never as markup
    for tag, attrs in Elements(html).seen:
        assert tag in TAGS and tag not in ("img", "script", "style", "iframe"), html
        for name, value in attrs:
            assert not name.startswith("on") and name != "style" and name != "src", html
            if name == "href":
                assert (value or "").split(":")[0] in ("http", "https", "mailto", "ftp", "magnet"), html


def test_the_sanitiser_keeps_only_the_matrix_tags_and_safe_links():
    dirty = ('<div onclick="x"><font color="red">f</font><a href="https://ok.example" target="_blank" '
             'style="color:red">ok</a><a href="ftp://files.example/x">f</a><code class="language-py">1</code>'
             '<code class="evil other">2</code><svg><circle/></svg><object data="x"></object></div>')
    clean = sanitise(dirty)
    assert clean == ('<div>f<a href="https://ok.example" target="_blank">ok</a><a href="ftp://files.example/x">f</a>'
                     '<code class="language-py">1</code><code>2</code></div>')
    assert {"p", "a", "pre", "code", "table", "blockquote"} <= TAGS and "img" not in TAGS


def test_huge_and_binary_replies_render_without_error():
    big = render("**x** " * 5_000)
    assert big.html.count("<strong>x</strong>") == 5_000
    odd = render("\x00\x01\ufffd text \udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
    assert "text" in odd.html and "\x00" not in odd.html
    for deep in (">" * 5_000 + " deep", "- " * 300 + "deep", "*" * 2_000 + "deep" + "*" * 2_000,
                 "[" * 3_000 + "deep" + "](x)" * 3_000):
        assert "deep" in render(deep).html  # too deep for the parser: shown as text, never dropped


def test_a_mail_part_is_a_whole_document():
    doc = html_document(render("**hi**").html)
    assert doc.startswith("<!DOCTYPE html>") and "<strong>hi</strong>" in doc and doc.rstrip().endswith("</html>")
