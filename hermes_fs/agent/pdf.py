"""Markdown to a PDF report (the `write_pdf` tool, a cron job's PDF attachment).

The Markdown comes from a model, so it is hostile input: it is rendered by markdown-it with raw
HTML off (a model's `<script>` or `<img>` is shown as text), images become a text line naming
them (a remote image is never fetched: nothing here opens a URL), and the HTML handed to fpdf2 is
cut down by nh3 to the tags fpdf2 lays out. Size is bounded (characters in, pages out). A
document fpdf2 cannot lay out (a word too long for a table cell, say) is laid out again as plain
text, so a report is always produced from valid text.

Fonts: DejaVu (Debian's fonts-dejavu-core) when installed, for the scripts it covers, with fallback
fonts for what it lacks: Noto Sans CJK (fonts-noto-cjk) for Chinese, Japanese and Korean, Symbola
(fonts-symbola) or Noto Emoji for emoji (monochrome outlines: fpdf2 cannot embed colour bitmap emoji),
and any font files named in HERMES_PDF_FONTS (paths separated by ":"). Without DejaVu, the PDF core
fonts, which hold Latin-1 only. Characters no loaded font has are never dropped silently: they are
drawn as "?" and the report says which (`Report.missing`, logged as a warning, and shown by the
write_pdf tool), naming the package that would draw them.
"""

from __future__ import annotations

import html
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

log = logging.getLogger(__name__)

MAX_MARKDOWN_CHARS = 200_000  # a long report is ~60 pages; more is a dump, not a summary
MAX_PAGES = 300
FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/local/share/fonts/dejavu"))
FONT_FILES = {"": "DejaVuSans.ttf", "B": "DejaVuSans-Bold.ttf", "I": "DejaVuSans-Oblique.ttf",
              "BI": "DejaVuSans-BoldOblique.ttf"}
MONO_FILE = "DejaVuSansMono.ttf"
TAGS = {"h1", "h2", "h3", "h4", "h5", "h6", "p", "br", "hr", "b", "strong", "i", "em", "u", "s", "a", "ul", "ol",
        "li", "pre", "code", "blockquote", "table", "thead", "tbody", "tr", "th", "td"}
LINK_SCHEMES = {"http", "https", "mailto"}
# fallback fonts, each the first file found: (name, candidates, what installs it)
FALLBACK_FONTS = (
    ("cjk", (Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"),
             Path("/usr/share/fonts/opentype/noto/NotoSansCJKsc-Regular.otf"),
             Path("/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc"),  # Fedora, Arch
             Path("/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc")),
     "fonts-noto-cjk"),
    ("emoji", (Path("/usr/share/fonts/truetype/ancient-scripts/Symbola_hint.ttf"),
               Path("/usr/share/fonts/truetype/ancient-scripts/Symbola.ttf"),
               Path("/usr/share/fonts/truetype/noto/NotoEmoji-Regular.ttf"),
               Path("/usr/share/fonts/TTF/Symbola.ttf")),
     "fonts-symbola"),
)
EXTRA_FONTS_ENV = "HERMES_PDF_FONTS"


@dataclass(frozen=True)
class Report:
    """A rendered PDF: its bytes, its page count, and whether the plain-text layout was used."""

    data: bytes
    pages: int
    plain: bool = False
    missing: str = ""  # characters of the text no loaded font has (drawn as "?"); "" when all are drawn

    def warning(self) -> str:
        """What the person should know about missing characters ("" when none are)."""
        if not self.missing:
            return ""
        shown = "".join(sorted(set(self.missing)))[:20]
        return (f"{len(self.missing)} characters of the report have no font here and show as '?' ({shown}); "
                f"install {missing_font_hint(self.missing)}")


def check_markdown(text: object) -> str:
    """The Markdown, or an InputError saying why it is not taken (not text, binary, too long)."""
    if not isinstance(text, str):
        raise InputError("markdown must be text")
    if "\x00" in text:
        raise InputError("markdown holds binary data (NUL bytes); give text")
    if len(text) > MAX_MARKDOWN_CHARS:
        raise InputError(f"markdown is {len(text)} characters; at most {MAX_MARKDOWN_CHARS} make a report")
    controls = sum(1 for c in text[:20000] if ord(c) < 32 and c not in "\n\r\t")
    if controls > 100:
        raise InputError("markdown is mostly control characters (binary data?); give text")
    return text


def markdown_to_pdf(markdown: str, title: str = "") -> Report:
    """A PDF of the Markdown (A4, one column), titled `title` in its metadata."""
    text = check_markdown(markdown)
    body = _html(text)
    try:
        pdf, fonts = _document(title)
        from fpdf.fonts import TextStyle

        mono = {tag: TextStyle(font_family=fonts.mono) for tag in ("code", "pre")}
        pdf.write_html(body if fonts.unicode else latin1(body), font_family=fonts.body, tag_styles=mono,
                       image_map=_no_images, warn_on_tags_not_matching=False)
        plain = False
    except Exception as exc:  # fpdf2 could not lay this out: the same text, plainly
        log.info("pdf: laid out as plain text (%s: %s)", type(exc).__name__, exc)
        pdf = _plain(text, title)
        plain = True
    if pdf.pages_count > MAX_PAGES:
        raise InputError(f"the report would be {pdf.pages_count} pages; at most {MAX_PAGES}")
    report = Report(bytes(pdf.output()), pdf.pages_count, plain, _missing(text, pdf))
    if report.missing:
        log.warning("pdf: %s", report.warning())
    return report


def _missing(text: str, pdf) -> str:
    """The characters of `text` (each time it occurs, spaces and controls aside) that none of the
    document's fonts can draw."""
    wanted = {c for c in text if ord(c) > 0x7F and c.isprintable() and not c.isspace()}
    if not wanted:
        return ""
    covered: set[int] = set()
    core = True
    for font in pdf.fonts.values():
        cmap = getattr(font, "cmap", None)
        if isinstance(cmap, dict) and cmap:
            covered |= set(cmap)
            core = False
    if core:
        covered = set(range(0x100))
    # variation selectors and joiners only shape what is around them: nothing to draw
    gone = {c for c in wanted if ord(c) not in covered and not (0xFE00 <= ord(c) <= 0xFE0F or ord(c) in (0x200D, 0x20E3))}
    return "".join(c for c in text if c in gone)


def missing_font_hint(chars: str) -> str:
    """Which Debian package would draw these characters."""
    packages = []
    if any(0x2E80 <= ord(c) <= 0x9FFF or 0xAC00 <= ord(c) <= 0xD7AF or 0xF900 <= ord(c) <= 0xFFEF
           or 0x20000 <= ord(c) <= 0x3FFFF for c in chars):
        packages.append("fonts-noto-cjk")
    if any(ord(c) >= 0x1F000 or 0x2600 <= ord(c) <= 0x27BF for c in chars):
        packages.append("fonts-symbola")
    if not packages or any(ord(c) < 0x2E80 for c in chars):
        packages.insert(0, "fonts-dejavu-core")
    return " and ".join(dict.fromkeys(packages)) + f" (or name font files in {EXTRA_FONTS_ENV})"


@dataclass(frozen=True)
class _Fonts:
    body: str
    mono: str
    unicode: bool  # False: the PDF core fonts, Latin-1 only


def _no_images(src: str) -> str:
    raise InputError("images are not embedded in reports")


def _html(markdown: str) -> str:
    import nh3
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
        ["table", "strikethrough"])
    md.add_render_rule("image", _image_as_text)
    rendered = md.render(markdown)
    return nh3.clean(rendered, tags=TAGS, attributes={"a": {"href"}}, url_schemes=LINK_SCHEMES, link_rel=None)


def _image_as_text(renderer, tokens, idx, options, env) -> str:
    token = tokens[idx]
    alt = "".join(c.content for c in (token.children or [])) or "image"
    src = token.attrGet("src") or ""
    return html.escape(f"[image: {alt}" + (f" — {src}" if src else "") + "]")


def _fonts() -> tuple[dict[str, Path], Path | None] | None:
    for folder in FONT_DIRS:
        faces = {style: folder / name for style, name in FONT_FILES.items()}
        if all(p.is_file() for p in faces.values()):
            mono = folder / MONO_FILE
            return faces, mono if mono.is_file() else None
    return None


def fallback_fonts() -> list[tuple[str, Path]]:
    """The fallback fonts found on this machine: the first file of each of FALLBACK_FONTS, then
    the files named in HERMES_PDF_FONTS."""
    import os

    found = []
    for name, candidates, _package in FALLBACK_FONTS:
        path = next((p for p in candidates if p.is_file()), None)
        if path is not None:
            found.append((name, path))
    for i, extra in enumerate(p for p in os.environ.get(EXTRA_FONTS_ENV, "").split(":") if p):
        if Path(extra).is_file():
            found.append((f"extra{i}", Path(extra)))
        else:
            log.warning("pdf: %s names %s, which is not a file", EXTRA_FONTS_ENV, extra)
    return found


def _pdf_class():
    from fpdf import FPDF

    class ReportPDF(FPDF):
        """fpdf2 with each text line naming its font again. With fallback fonts, a line that began
        in a fallback (CJK, emoji) could leave the next paragraph's first line without any font
        (fpdf2 2.8.9: "No font in show", its text lost to a reader): one `Tf` per line costs a few
        bytes and leaves nothing to chance."""

        def _render_styled_text_line(self, *args, **kwargs):
            self.current_font_is_set_on_page = False
            return super()._render_styled_text_line(*args, **kwargs)

    return ReportPDF


def _document(title: str):
    pdf = _pdf_class()(format="A4")
    pdf.set_auto_page_break(True, margin=15)
    pdf.set_margins(18, 18, 18)
    pdf.set_creator("hermes-fs")
    if title:
        pdf.set_title(title[:200])
    found = _fonts()
    if found is not None:
        faces, mono = found
        for style, path in faces.items():
            pdf.add_font("dejavu", style, str(path))
        if mono is not None:
            pdf.add_font("dejavumono", "", str(mono))
        fallbacks = []
        for name, path in fallback_fonts():
            try:
                pdf.add_font(name, "", str(path))
                fallbacks.append(name)
            except Exception as exc:  # noqa: BLE001 - a broken font file: the others still serve
                log.warning("pdf: cannot use the font %s (%s: %s)", path, type(exc).__name__, exc)
        if fallbacks:  # a glyph DejaVu lacks comes from the first of these that has it, in any style
            pdf.set_fallback_fonts(fallbacks, exact_match=False)
        fonts = _Fonts("dejavu", "dejavumono" if mono else "dejavu", True)
    else:
        fonts = _Fonts("helvetica", "courier", False)
    pdf.add_page()
    pdf.set_font(fonts.body, size=11)
    return pdf, fonts


def _plain(text: str, title: str):
    """The text itself, wrapped at any character: what fpdf2 cannot lay out as a document. Past
    MAX_PAGES it stops with an InputError (never an endless document)."""
    from fpdf.enums import WrapMode, XPos, YPos

    pdf, fonts = _document(title)
    if not fonts.unicode:
        text = latin1(text)
    pdf.set_font(fonts.mono, size=9)
    for line in text.splitlines() or [""]:
        pdf.multi_cell(0, 4.5, line or " ", wrapmode=WrapMode.CHAR, new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        if pdf.pages_count > MAX_PAGES:
            raise InputError(f"the report would be over {MAX_PAGES} pages")
    return pdf


def latin1(body: str) -> str:
    return body.encode("latin-1", errors="replace").decode("latin-1")


def safe_pdf_name(name: str) -> str:
    """A report's file name: letters, digits, dots, dashes and underscores, ending in .pdf."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name.strip()).strip(".-_")[:100]
    if stem.lower().endswith(".pdf"):
        stem = stem[:-4].rstrip(".-_")
    if not stem:
        raise InputError("filename is empty once made safe (letters, digits, dots, dashes)")
    return stem + ".pdf"


__all__ = ["Report", "check_markdown", "markdown_to_pdf", "safe_pdf_name"]
