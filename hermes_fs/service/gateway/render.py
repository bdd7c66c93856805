"""A reply's Markdown as the HTML a chat client or a mail reader shows, for every channel that can
show HTML (Matrix `formatted_body`, e-mail's text/html part, and any channel added later), and as
the markup of chats that show only inline formatting (`inline_html`, a small HTML subset, and
`mrkdwn`, the `*bold*` / `<url|text>` markup some chat APIs take).

The reply is model output, so hostile: raw HTML in it is never passed through (markdown-it renders
it as text), and the HTML it renders is then sanitised with nh3 to the tags the Matrix
specification allows in `formatted_body` (a set mail readers show as well). Links keep only
http(s), ftp, mailto and magnet targets; relative links are dropped; an image is shown as a link
to it, so no client fetches anything when the message is displayed. The plain text stays the
Markdown as written: it is the fallback every client has.

The inline forms render what such a chat can show (bold, italic, strikethrough, code, code
blocks, links, quotes) and write the rest as text (headings bold, list items with bullets or
numbers, table rows with ` | `); every character of the model's text is escaped for the markup,
and only http(s) and mailto links are kept.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import urlsplit

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


# -- inline markup -----------------------------------------------------------------------------------

INLINE_TAGS = {"b", "i", "s", "u", "code", "pre", "a", "blockquote"}  # what inline_html may hold
INLINE_SCHEMES = {"http", "https", "mailto"}  # links kept by the inline forms


@dataclass(frozen=True)
class Markup:
    """How a chat writes inline formatting. Every function gets text already escaped with
    `escape`, but `code` and `pre`, which get the raw text and escape it themselves."""

    escape: Callable[[str], str]
    bold: tuple[str, str]
    italic: tuple[str, str]
    strike: tuple[str, str]
    code: Callable[[str], str]  # inline code, from its raw text
    pre: Callable[[str, str], str]  # a code block, from its raw text and its language ("" if none)
    link: Callable[[str, str], str]  # (an allowed href, the rendered text)
    quote: Callable[[str], str]  # a rendered block quote
    finish: Callable[[str], str]  # a last pass over the whole result


@cache
def _inline_markdown() -> Any:
    from markdown_it import MarkdownIt

    # html: False: raw HTML in a reply (the model's text is not trusted) is text, never markup
    return MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


def _escape_html(text: str) -> str:
    return html.escape(text, quote=False)


def _html_pre(code: str, lang: str) -> str:
    cls = f' class="language-{html.escape(lang)}"' if re.fullmatch(r"[\w+#.-]{1,30}", lang) else ""
    return f"<pre><code{cls}>{_escape_html(code)}</code></pre>"


# the only named entities Telegram's HTML parse mode accepts (core.telegram.org/bots/api#html-style)
CHAT_ENTITIES = {"lt", "gt", "amp", "quot"}
_ENTITY = re.compile(r"&(#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")


def _chat_entities(text: str) -> str:
    """nh3's serialiser writes U+00A0 as `&nbsp;` (and could others by name): every entity but the
    four a chat's HTML accepts becomes its character again (`&amp;` stays, so a literal `&nbsp;` in
    the text stays text)."""
    def one(m: re.Match) -> str:
        name = m.group(1)
        if name in CHAT_ENTITIES:
            return m.group(0)
        char = html.unescape(m.group(0))
        return m.group(0) if char == m.group(0) else _escape_html(char)

    return _ENTITY.sub(one, text)


def _sanitise_inline(text: str) -> str:
    import nh3

    return _chat_entities(nh3.clean(text, tags=INLINE_TAGS, attributes={"a": {"href"}, "code": {"class"}},
                                    url_schemes=INLINE_SCHEMES, link_rel=None, strip_comments=True))


HTML_SUBSET = Markup(
    escape=_escape_html, bold=("<b>", "</b>"), italic=("<i>", "</i>"), strike=("<s>", "</s>"),
    code=lambda raw: f"<code>{_escape_html(raw)}</code>", pre=_html_pre,
    link=lambda href, text: f'<a href="{html.escape(href, quote=True)}">{text}</a>',
    quote=lambda text: f"<blockquote>{text}</blockquote>", finish=_sanitise_inline)


def _escape_mrkdwn(text: str) -> str:
    """The three characters mrkdwn reserves for its <links>, mentions and entities, escaped as its
    documentation says: the model's text can then write no link, mention or @channel of its own."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _mrkdwn_code(raw: str) -> str:
    return f"`{_escape_mrkdwn(raw.replace('`', chr(0x2018)))}`" if raw.strip() else _escape_mrkdwn(raw)


def _mrkdwn_pre(raw: str, lang: str) -> str:
    return "```\n" + _escape_mrkdwn(raw.replace("```", "`\u200b``")) + "\n```"


_DOMAIN = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,})", re.I)


def honest_label(href: str, label: str) -> str:
    """A link's label that names a web address other than where the link goes (`[https://bank.example]
    (https://evil.example)`, Slack's disguised `<https://evil|innocent>` written as Markdown) gets
    the real host after it, so no label hides where a link leads."""
    from urllib.parse import unquote, urlsplit

    if label.replace("\u00a6", "|") in (href, unquote(href)):  # an autolink: labelled with its own target
        return label
    host = (urlsplit(href).hostname or "").lower()
    named = {m.group(1).lower().rstrip(".") for m in _DOMAIN.finditer(label)}
    if named and any(n != host and not host.endswith("." + n) for n in named):
        return f"{label} ({host or href})"
    return label


def _mrkdwn_link(href: str, text: str) -> str:
    target = _escape_mrkdwn(href).replace("|", "%7C")
    label = honest_label(href, text.replace("|", "\u00a6").strip())
    return f"<{target}|{label}>" if label else f"<{target}>"


MRKDWN = Markup(
    escape=_escape_mrkdwn, bold=("*", "*"), italic=("_", "_"), strike=("~", "~"),
    code=_mrkdwn_code, pre=_mrkdwn_pre, link=_mrkdwn_link,
    quote=lambda text: "\n".join("> " + line for line in text.split("\n")), finish=lambda text: text)


# styles as ranges over plain text (Signal's): each written as a pair of private-use characters by
# the writer, then taken out and turned into (start, length, style) in UTF-16 code units
_STYLE_MARKS = {"BOLD": "\ue000\ue001", "ITALIC": "\ue002\ue003", "STRIKETHROUGH": "\ue004\ue005",
                "MONOSPACE": "\ue006\ue007"}
_PRIVATE = re.compile("[\ue000-\ue007]")


def _plain(text: str) -> str:
    return _PRIVATE.sub("", text)


def _mono(raw: str) -> str:
    m = _STYLE_MARKS["MONOSPACE"]
    return m[0] + _plain(raw) + m[1] if raw.strip() else _plain(raw)


STYLED = Markup(
    escape=_plain, bold=tuple(_STYLE_MARKS["BOLD"]), italic=tuple(_STYLE_MARKS["ITALIC"]),  # type: ignore[arg-type]
    strike=tuple(_STYLE_MARKS["STRIKETHROUGH"]), code=_mono,  # type: ignore[arg-type]
    pre=lambda raw, lang: _mono(raw),
    link=lambda href, text: text if text.strip() == href else f"{text} ({href})",
    quote=lambda text: "\n".join("> " + line for line in text.split("\n")), finish=lambda text: text)


@dataclass(frozen=True)
class Styled:
    """A reply as plain text and its styles: (start, length, style) in UTF-16 code units."""

    text: str
    styles: list[tuple[int, int, str]]


def styled(markdown: str) -> Styled:
    """The reply's Markdown as plain text with style ranges (bold, italic, strikethrough,
    monospace), for chats that style ranges of a text rather than parse markup (Signal). Links are
    written out as `text (url)`; nothing the model writes becomes markup."""
    text = inline_markup(markdown, STYLED)
    kinds = {c: (style, i == 0) for style, pair in _STYLE_MARKS.items() for i, c in enumerate(pair)}
    out: list[str] = []
    opened: dict[str, list[int]] = {}
    spans: list[tuple[int, int, str]] = []
    pos = 0
    for ch in text:
        if ch in kinds:
            style, opening = kinds[ch]
            if opening:
                opened.setdefault(style, []).append(pos)
            elif opened.get(style):
                start = opened[style].pop()
                if pos > start:
                    spans.append((start, pos - start, style))
            continue
        out.append(ch)
        pos += 2 if ord(ch) > 0xFFFF else 1
    return Styled("".join(out), sorted(spans))


def inline_html(text: str) -> str:
    """The reply's Markdown in a small HTML subset (INLINE_TAGS; block structure as text),
    escaped and sanitised: for chats whose HTML mode knows only inline tags."""
    return inline_markup(text, HTML_SUBSET)


def mrkdwn(text: str) -> str:
    """The reply's Markdown as mrkdwn (`*bold*`, `_italic_`, `~strike~`, `<url|text>`, `> quote`)."""
    return inline_markup(text, MRKDWN)


def inline_markup(markdown: str, markup: Markup) -> str:
    """Markdown written with `markup`: what it can show, as text the rest. Markdown nested deeper
    than the parser goes (whose text markdown-it would drop) is sent as escaped text."""
    md = _inline_markdown()
    tokens = md.parse(markdown)
    if _deepest(tokens) >= md.options["maxNesting"] - 2:
        return markup.escape(markdown.strip())
    return markup.finish(_Writer(markup).blocks(tokens))


class _Writer:
    """One rendering: a stack of output buffers (a quote is rendered, then wrapped)."""

    def __init__(self, markup: Markup):
        self.m = markup
        self.out: list[list[str]] = [[]]
        self.lists: list[list[int]] = []  # per open list: [next number] (0: bullets)

    def blocks(self, tokens) -> str:
        m, out = self.m, self.out
        for tok in tokens:
            kind = tok.type
            if kind == "inline":
                out[-1].append(self.inline(tok.children or []))
            elif kind == "heading_open":
                out[-1].append(m.bold[0])
            elif kind == "heading_close":
                out[-1].append(m.bold[1] + "\n\n")
            elif kind == "paragraph_close":
                out[-1].append("\n" if self.lists else "\n\n")
            elif kind == "bullet_list_open":
                self.lists.append([0])
            elif kind == "ordered_list_open":
                self.lists.append([int(tok.attrs.get("start", 1) or 1)])
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self.lists.pop()
                if not self.lists:
                    out[-1].append("\n")
            elif kind == "list_item_open":
                counter = self.lists[-1]
                out[-1].append("  " * (len(self.lists) - 1) + ("• " if counter[0] == 0 else f"{counter[0]}. "))
                if counter[0]:
                    counter[0] += 1
            elif kind in ("fence", "code_block"):
                lang = tok.info.strip().split(" ")[0] if tok.info else ""
                out[-1].append(m.pre(tok.content.rstrip("\n"), lang) + "\n\n")
            elif kind == "blockquote_open":
                out.append([])
            elif kind == "blockquote_close":
                inner = _trimmed(out.pop())
                out[-1].append(m.quote(inner) + "\n\n")
            elif kind == "hr":
                out[-1].append("——————\n\n")
            elif kind in ("th_close", "td_close"):
                out[-1].append(" | ")
            elif kind == "tr_close":
                if out[-1] and out[-1][-1] == " | ":
                    out[-1][-1] = "\n"
            elif kind == "table_close":
                out[-1].append("\n")
        return _trimmed(out[0])

    def inline(self, children) -> str:
        m = self.m
        marks = {"strong_open": m.bold[0], "strong_close": m.bold[1], "em_open": m.italic[0],
                 "em_close": m.italic[1], "s_open": m.strike[0], "s_close": m.strike[1]}
        parts: list[list[str]] = [[]]  # a link's text is rendered in a buffer of its own
        links: list[str | None] = []  # per open link: its href when kept
        for c in children:
            if c.type == "code_inline":
                parts[-1].append(m.code(c.content))
            elif c.type in marks:
                parts[-1].append(marks[c.type])
            elif c.type in ("softbreak", "hardbreak"):
                parts[-1].append("\n")
            elif c.type == "link_open":
                href = str(c.attrs.get("href") or "")
                links.append(href if urlsplit(href).scheme.lower() in INLINE_SCHEMES else None)
                parts.append([])
            elif c.type == "link_close" and links:
                text, kept = "".join(parts.pop()), links.pop()
                parts[-1].append(m.link(kept, text) if kept else text)
            elif c.type == "image":
                parts[-1].append(m.escape(c.content or str(c.attrs.get("alt") or "")))
            else:  # text, and whatever else carries content
                parts[-1].append(m.escape(c.content))
        while len(parts) > 1:  # a link the parser left open: its text, without the link
            text = "".join(parts.pop())
            parts[-1].append(text)
        return "".join(parts[0])


def _trimmed(out: list[str]) -> str:
    while out and not out[-1].strip():
        out.pop()
    return "".join(out).rstrip()


__all__ = ["HTML_SUBSET", "INLINE_TAGS", "MRKDWN", "STYLED", "TAGS", "Markup", "Rendered", "Styled", "html_document",
           "inline_html", "inline_markup", "mrkdwn", "render", "sanitise", "styled"]
