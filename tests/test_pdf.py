"""Markdown → PDF reports (agent/pdf.py) and the write_pdf tool: the report reads back as its text,
and hostile Markdown (script, raw HTML, remote images, huge, binary, unbreakable) gives a clear
error or a safe report — never a fetch, never a crash."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pypdf import PdfReader

from hermes_fs.agent import pdf
from hermes_fs.agent.tools import ToolBox
from hermes_fs.errors import InputError


def text_of(data: bytes) -> str:
    return "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(data)).pages)


@pytest.fixture
def image_server():
    """A real HTTP server on 127.0.0.1 that records every request: a report must never ask it."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", asked
    server.shutdown()


def test_a_report_keeps_its_structure_and_text():
    md = ("# Weekly summary\n\nThe **build** is *green*; see [the log](https://example.org/log).\n\n"
          "- first point\n- second point\n\n| metric | value |\n|---|---|\n| p95 | 120 ms |\n\n"
          "```\nprint('hello')\n```\n\n> a quote\n\nCafé, naïve, Łódź — ok.\n")
    report = pdf.markdown_to_pdf(md, "Weekly summary")
    assert report.data.startswith(b"%PDF-") and report.pages == 1 and not report.plain
    text = text_of(report.data)
    for words in ("Weekly summary", "build", "first point", "p95", "120 ms", "print('hello')", "a quote"):
        assert words in text
    if pdf._fonts() is not None:  # DejaVu installed: text beyond Latin-1 survives
        assert "Łódź" in text
    assert PdfReader(io.BytesIO(report.data)).metadata.title == "Weekly summary"


def test_script_html_and_remote_images_are_text_never_fetched(image_server):
    url, asked = image_server
    md = (f"# Report\n\n<script>fetch('{url}/js')</script>\n\n<img src=\"{url}/raw.png\">\n\n"
          f"![the chart]({url}/chart.png)\n\n[click](javascript:alert(1))\n\n<iframe src=\"{url}/frame\"></iframe>\n")
    report = pdf.markdown_to_pdf(md)
    text = text_of(report.data)
    assert asked == []
    assert "<script>" in text  # the model's HTML is shown as text, not interpreted
    assert "[image: the chart" in text and "chart.png" in text
    assert b"/JavaScript" not in report.data and b"javascript:" not in report.data.lower()


def test_huge_binary_and_non_text_markdown_are_refused_with_a_reason():
    with pytest.raises(InputError, match="at most 200000"):
        pdf.markdown_to_pdf("x" * (pdf.MAX_MARKDOWN_CHARS + 1))
    with pytest.raises(InputError, match="binary"):
        pdf.markdown_to_pdf("ok\x00\x01\x02")
    with pytest.raises(InputError, match="control characters"):
        pdf.markdown_to_pdf("".join(chr(i % 31 + 1) for i in range(5000)))
    with pytest.raises(InputError, match="must be text"):
        pdf.check_markdown(b"bytes")


def test_what_cannot_be_laid_out_is_laid_out_as_plain_text():
    md = "| a | b | c | d | e |\n|---|---|---|---|---|\n| " + "W" * 3000 + " | 1 | 2 | 3 | 4 |\n"
    report = pdf.markdown_to_pdf(md)
    assert report.plain and report.pages >= 1
    assert "WWWW" in text_of(report.data)


def test_page_count_is_bounded(monkeypatch):
    monkeypatch.setattr(pdf, "MAX_PAGES", 2)
    with pytest.raises(InputError, match="pages"):
        pdf.markdown_to_pdf("\n\n".join(f"paragraph {i}" for i in range(400)))


def test_file_names_are_made_safe():
    assert pdf.safe_pdf_name("../../etc/summary") == "etc-summary.pdf"
    assert pdf.safe_pdf_name("Report 2026.PDF") == "Report-2026.pdf"
    with pytest.raises(InputError):
        pdf.safe_pdf_name("../..")


def test_write_pdf_writes_into_the_workspace_outputs_then_send_file_takes_it(vault, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    box = ToolBox(files=vault.files, config=vault.config, vault_root=vault.root, workspace=ws,
                  outbox=vault.state_dir / "outbox" / "s", enabled=["write_pdf", "send_file"])
    answer = box.call("write_pdf", json.dumps({"markdown": "# Hi\n\nthere", "filename": "../summary"}))
    assert answer.startswith(f"ok: wrote {ws}/outputs/summary.pdf (1 page"), answer
    assert (ws / "outputs" / "summary.pdf").read_bytes().startswith(b"%PDF-")
    assert box.call("send_file", json.dumps({"path": str(ws / "outputs" / "summary.pdf")})).startswith("ok:")
    assert box.take_outgoing()[0].mime == "application/pdf"
    assert "binary" in box.call("write_pdf", json.dumps({"markdown": "\x00", "filename": "x"}))
    assert "missing required" in box.call("write_pdf", json.dumps({"markdown": "x"}))


def test_write_pdf_does_not_follow_a_symlinked_folder(vault, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws / "outputs").symlink_to(elsewhere)
    box = ToolBox(files=vault.files, config=vault.config, vault_root=vault.root, workspace=ws, enabled=["write_pdf"])
    answer = box.call("write_pdf", json.dumps({"markdown": "# Hi", "filename": "a.pdf"}))
    assert answer.startswith("error:") and list(elsewhere.iterdir()) == []


# -- reports in any script ------------------------------------------------------------------------
MANY_SCRIPTS = ("# 週報 Weekly\n\n中文报告：你好世界。日本語のレポート：こんにちは、東京。\n\n"
                "**太字の見出し 🚀** and *斜体* 한국어\n\nStatus: ✅ done 😀 🎉\n\n"
                "- 項目一 🍣\n- second\n\n| 列 | 値 |\n|---|---|\n| 東京 | 🗼 |\n\n```\nprint('代码')\n```\n")


def pdftotext(data: bytes, tmp_path) -> str:
    import subprocess

    path = tmp_path / "r.pdf"
    path.write_bytes(data)
    r = subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Syntax Error" not in r.stderr, r.stderr
    return r.stdout


def test_chinese_japanese_and_emoji_read_back_whole(tmp_path):
    """With the fonts `make test` installs (scripts/reports-test-env.sh: DejaVu, Noto Sans CJK,
    Symbola), every character is drawn and a PDF reader gets it back (poppler's pdftotext)."""
    import shutil

    if shutil.which("pdftotext") is None or pdf._fonts() is None or len(pdf.fallback_fonts()) < 2:
        pytest.skip("needs pdftotext and the report fonts: bash scripts/reports-test-env.sh installs them")
    report = pdf.markdown_to_pdf(MANY_SCRIPTS, "週報")
    assert not report.plain and report.missing == "" and report.warning() == ""
    text = pdftotext(report.data, tmp_path)
    for words in ("週報 Weekly", "中文报告：你好世界。", "日本語のレポート：こんにちは、東京。", "太字の見出し 🚀", "斜体",
                  "한국어", "✅ done 😀 🎉", "項目一 🍣", "second", "東京", "🗼", "print('代码')"):
        assert words in text, (words, text)


def test_a_character_no_font_has_is_reported_never_dropped_silently(monkeypatch, vault, tmp_path, caplog):
    monkeypatch.setattr(pdf, "FALLBACK_FONTS", ())  # as on a machine without fonts-noto-cjk and Symbola
    report = pdf.markdown_to_pdf("Report: 你好 and 🍣, café", "x")
    assert set(report.missing) == set("你好🍣") and "é" not in report.missing
    warning = report.warning()
    assert "3 characters" in warning and "fonts-noto-cjk" in warning and "fonts-symbola" in warning
    assert any("fonts-noto-cjk" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    ws = tmp_path / "ws"
    ws.mkdir()
    box = ToolBox(files=vault.files, config=vault.config, vault_root=vault.root, workspace=ws, enabled=["write_pdf"])
    answer = box.call("write_pdf", json.dumps({"markdown": "# 你好", "filename": "hi"}))
    assert answer.startswith("ok: wrote") and "warning: 2 characters" in answer and "fonts-noto-cjk" in answer
