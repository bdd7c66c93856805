"""A reply's Markdown as the HTML a chat client or a mail reader shows, for every channel that can
show HTML (Matrix `formatted_body`, e-mail's text/html part, and any channel added later).

The reply is model output, so hostile: raw HTML in it is never passed through (markdown-it renders
it as text), and the HTML it renders is then sanitised with nh3 to the tags the Matrix
specification allows in `formatted_body` (a set mail readers show as well). Links keep only
http(s), ftp, mailto and magnet targets; relative links are dropped; an image is shown as a link
to it, so no client fetches anything when the message is displayed. The plain text stays the
Markdown as written: it is the fallback every client has.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

# The Matrix client-server specification's allowed tags and attributes for org.matrix.custom.html
# (img left out: see the module docstring).
TAGS = {"del", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "p", "a", "ul", "ol", "sup", "sub", "li",
        "b", "i", "u", "strong", "em", "s", "code", "hr", "br", "div", "table", "thead", "tbody", "tr", "th",
        "td", "caption", "pre", "span", "details", "summary"}
ATTRIBUTES = {"a": {"href", "target"}, "ol": {"start"}, "code": {"class"}}
URL_SCHEMES = {"http", "https", "ftp", "mailto", "magnet"}
LANGUAGE_CLASS = re.compile(r"language-[A-Za-z0-9_+#.-]{1,40}")


@dataclass(frozen=True)
class Rendered:
    """A reply as plain text and as sanitised HTML. `plain` is True when the HTML says no more
    than the text does (one paragraph, no markup): a channel may then send the text alone."""

    text: str
    html: str
    plain: bool


@cache
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["table", "strikethrough"])
    md.add_render_rule("image", _image_as_link)
    return md


def _image_as_link(self, tokens, idx, options, env) -> str:
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = self.renderInlineAsText(token.children or [], options, env) or src
    return f'<a href="{html.escape(src)}">{html.escape(alt, quote=False)}</a>'


def _keep_attribute(tag: str, name: str, value: str) -> str | None:
    if tag == "code" and name == "class":  # a code block's language, for highlighting
        return value if LANGUAGE_CLASS.fullmatch(value) else None
    return value


def sanitise(fragment: str) -> str:
    """An HTML fragment cut down to the allowed tags, attributes and link targets."""
    import nh3

    return nh3.clean(fragment, tags=TAGS, clean_content_tags={"script", "style"}, attributes=ATTRIBUTES,
                     attribute_filter=_keep_attribute, url_schemes=URL_SCHEMES, url_relative="deny",
                     link_rel=None, strip_comments=True)


def render(text: str) -> Rendered:
    """The reply's Markdown as sanitised HTML. Markdown nested deeper than the parser goes (whose
    text markdown-it would drop) is shown as plain text instead: nothing of the reply is lost."""
    md = _markdown()
    escaped = html.escape(text.strip(), quote=False).replace('"', "&quot;")  # as markdown-it escapes
    plain_form = "<p>" + escaped.replace("\n", "<br />\n") + "</p>\n"
    env: dict = {}
    tokens = md.parse(text, env)
    if _deepest(tokens) >= md.options["maxNesting"] - 1:
        return Rendered(text, sanitise(plain_form).strip(), True)
    raw = md.renderer.render(tokens, md.options, env)
    return Rendered(text, sanitise(raw).strip(), raw == plain_form or not text.strip())


def _deepest(tokens) -> int:
    deepest = 0
    for t in tokens:
        deepest = max(deepest, t.level, _deepest(t.children or []) + t.level)
    return deepest


def html_document(fragment: str) -> str:
    """A whole HTML document around a rendered fragment (for a mail's text/html part)."""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"></head>\n"
            f"<body>\n{fragment}\n</body></html>\n")


__all__ = ["TAGS", "Rendered", "html_document", "render", "sanitise"]
