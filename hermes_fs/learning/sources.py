"""Reading documents for `learn`: Markdown, plain text, HTML and PDF files, or folders of them.

The text is data for the model, never instructions: invisible and bidirectional control characters
are removed, and a bad source (missing, encrypted, empty, binary junk) is a clear error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import unescape
from pathlib import Path

from ..errors import InputError
from ..store.docs import decode

TEXT_SUFFIXES = {".md", ".markdown", ".txt", ".rst", ""}
HTML_SUFFIXES = {".html", ".htm"}
PDF_SUFFIXES = {".pdf"}
SUPPORTED = TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES
# Zero-width, bidi embedding/override/isolate marks, BOM, soft hyphen, word joiner, tag characters.
_INVISIBLE = re.compile("[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\U000e0000-\U000e007f]")


@dataclass
class Source:
    path: str
    title: str
    text: str


def clean(text: str) -> str:
    return _INVISIBLE.sub("", text).replace("\r\n", "\n").strip()


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)


def html_to_text(html: str) -> tuple[str, str]:
    """(title, Markdown) of an HTML page: html2text keeps headings, lists and the indentation of
    code in <pre>; scripts and styles are dropped."""
    import html2text

    converter = html2text.HTML2Text()
    converter.body_width = 0  # never re-wrap lines: code and commands stay as written
    converter.ignore_images = True
    m = _TITLE.search(html)
    title = unescape(" ".join(m.group(1).split())) if m else ""
    return title, re.sub(r"\n{3,}", "\n\n", converter.handle(html))


def _decode(data: bytes, path: str) -> str:
    """Documents from elsewhere may be Windows-1252; vault files must be UTF-8 (docs.decode)."""
    try:
        return decode(data, path, fallback="cp1252")
    except InputError as exc:
        if "binary" in exc.reason:
            raise InputError("binary file, not a document hermes-fs can read (Markdown, text, HTML, PDF)", path) from None
        raise


def _pdf_text(path: Path) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted:
            raise InputError("encrypted PDF: decrypt it first (e.g. qpdf --decrypt)", str(path))
        pages = [_drop_page_number(page.extract_text() or "") for page in reader.pages]
        starts = _outline_starts(reader)
        if not starts:
            return "\n\n".join(pages)
        # The PDF's own outline gives the chapters: each starts a `# heading` at its first page.
        parts = ["\n\n".join(pages[: starts[0][1]])] if starts[0][1] > 0 else []
        for i, (title, first) in enumerate(starts):
            last = starts[i + 1][1] if i + 1 < len(starts) else len(pages)
            parts.append(f"# {title}\n\n" + "\n\n".join(pages[first:max(last, first + 1)]))
        return "\n\n".join(parts)
    except InputError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise InputError(f"unreadable PDF ({exc})", str(path)) from None


def _outline_starts(reader) -> list[tuple[str, int]]:
    """(title, first page index) of the outline's top-level entries, in page order."""
    try:
        items = reader.outline
    except Exception:  # a damaged outline: fall back to the text alone
        return []
    starts: list[tuple[str, int]] = []
    for item in items:
        if isinstance(item, list):
            continue  # nested entries: sections inside a chapter
        try:
            title = " ".join(str(item.title).split())[:120]
            page = reader.get_destination_page_number(item)
        except Exception:
            continue
        if title and (title, page) not in starts:
            starts.append((title, page))
    return sorted(starts, key=lambda tp: tp[1])


def _drop_page_number(text: str) -> str:
    """A page's first or last line that is only a number (or `Page 3 of 20`) is not content."""
    lines = text.strip().splitlines()
    number = re.compile(r"^\s*(?:page\s+)?\d{1,4}(?:\s*(?:/|of)\s*\d{1,4})?\s*$", re.I)
    while lines and number.match(lines[-1]):
        lines.pop()
    while lines and number.match(lines[0]):
        lines.pop(0)
    return "\n".join(lines)


def read_file(path: Path) -> Source:
    if not path.is_file():
        raise InputError("no such file", str(path))
    suffix = path.suffix.lower()
    if suffix in PDF_SUFFIXES:
        title, text = path.stem, _pdf_text(path)
    elif suffix in HTML_SUFFIXES:
        title, text = html_to_text(_decode(path.read_bytes(), str(path)))
        title = title or path.stem
    elif suffix in TEXT_SUFFIXES:
        title, text = path.stem, _decode(path.read_bytes(), str(path))
    else:
        raise InputError(f"unsupported kind of file {suffix!r} (Markdown, text, HTML, PDF)", str(path))
    text = clean(text)
    if len(re.findall(r"[A-Za-z]{2,}", text)) < 3:
        raise InputError("no readable text in this source", str(path))
    return Source(str(path), clean(title), text)


def read_sources(paths: list[Path]) -> list[Source]:
    """Files, and the supported files inside folders (sorted), each read and cleaned."""
    out = []
    for p in paths:
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in SUPPORTED - {""}
                           and not any(part.startswith(".") for part in f.relative_to(p).parts))
            if not files:
                raise InputError("folder holds no Markdown, text, HTML or PDF files", str(p))
            out += [read_file(f) for f in files]
        elif p.exists():
            out.append(read_file(p))
        else:
            raise InputError("no such file or folder", str(p))
    return out


@dataclass
class Chapter:
    title: str
    text: str


def chapters(source: Source, limit: int) -> list[Chapter]:
    """Split at Markdown headings, then pack sections into chapters of at most `limit` characters
    (a section longer than that is cut at paragraph boundaries). A source that fits is one chapter."""
    if len(source.text) <= limit:
        return [Chapter(source.title, source.text)]
    sections: list[Chapter] = []
    current_title, buf = source.title, list[str]()
    for line in source.text.split("\n"):
        m = re.match(r"^#{1,2} +(.+)$", line)
        has_body = any(ln.strip() and not ln.lstrip().startswith("#") for ln in buf)
        if m and has_body:  # a heading with nothing under it yet joins the next section
            sections.append(Chapter(current_title, "\n".join(buf).strip()))
            buf = []
        if m:
            current_title = m.group(1).strip()
        buf.append(line)
    if "".join(buf).strip():
        sections.append(Chapter(current_title, "\n".join(buf).strip()))
    out: list[Chapter] = []
    for sec in sections:
        if len(sec.text) <= limit:
            out.append(sec)
            continue
        part: list[str] = []
        n = 1
        for para in sec.text.split("\n\n"):
            while len(para) > limit:  # one enormous paragraph: hard cut
                out.append(Chapter(f"{sec.title} ({n})", para[:limit]))
                para, n = para[limit:], n + 1
            if sum(len(x) + 2 for x in part) + len(para) > limit and part:
                out.append(Chapter(f"{sec.title} ({n})", "\n\n".join(part)))
                part, n = [], n + 1
            part.append(para)
        if part:
            out.append(Chapter(f"{sec.title} ({n})" if n > 1 else sec.title, "\n\n".join(part)))
    return out
