"""Markdown documents with YAML frontmatter, split without rewriting a byte.

python-frontmatter finds the boundary and parses the YAML; we keep the offset of the body so
edits can splice the original text instead of re-serialising it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from frontmatter.default_handlers import YAMLHandler

from ..errors import InputError

_HANDLER = YAMLHandler()
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10x faster


def refuse_aliases(text: str) -> None:
    """YAML aliases (`*name`) can expand a few hundred bytes into megabytes (an "alias bomb");
    nothing hermes-fs reads needs them, so any alias is refused. Checked only when the text has
    both an anchor and an alias character, so ordinary files cost nothing."""
    if "&" not in text or "*" not in text:
        return
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark else None
            raise yaml.YAMLError(f"YAML aliases (*name) are not allowed (line {line})")


@dataclass
class Doc:
    meta: dict[str, Any]
    text: str  # the whole file, unchanged
    body_start: int  # offset of the body within text

    @property
    def body(self) -> str:
        return self.text[self.body_start :]


def decode(data: bytes, path: str, fallback: str | None = None) -> str:
    """Bytes of a file as text; binary or non-UTF-8 content is a clear error (unless `fallback`
    names a second encoding to try, for documents from elsewhere)."""
    if b"\x00" in data[:8192]:
        raise InputError("binary file, expected UTF-8 Markdown", path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if fallback:
            try:
                return data.decode(fallback)
            except UnicodeDecodeError:
                raise InputError("not readable text (unknown encoding)", path) from None
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text (byte {exc.start})", path, line) from None


def parse_doc(text: str, path: str, required: bool = False) -> Doc:
    """Split frontmatter from body. Malformed YAML raises InputError with the line."""
    if not _HANDLER.detect(text):
        if required:
            raise InputError("missing YAML frontmatter (the file must start with '---')", path, 1)
        return Doc({}, text, 0)
    try:
        fm, content = _HANDLER.split(text)
    except ValueError:
        raise InputError("frontmatter is not closed with '---'", path, 1) from None
    try:
        refuse_aliases(fm)
        meta = yaml.load(fm, Loader=_LOADER) if fm.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark else None  # +1 for 1-based, +1 for the opening ---
        raise InputError(f"invalid YAML frontmatter: {getattr(exc, 'problem', exc)}", path, line) from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise InputError("frontmatter must be a YAML mapping", path, 2)
    return Doc(meta, text, len(text) - len(content))  # content is the exact tail of text


def dump_doc(meta: dict[str, Any], body: str) -> str:
    """Serialise frontmatter (block style, which every YAML reader accepts) and a body."""
    fm = yaml.safe_dump(meta, sort_keys=False, default_flow_style=False, allow_unicode=True)
    if not body.startswith("\n"):
        body = "\n" + body
    return f"---\n{fm}---{body}"
