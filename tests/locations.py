"""Folders the tests read from, named once: a test module moved into a subsystem folder
(tests/sync/, tests/web/, ...) finds them the same way."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"
BENCH = ROOT / "bench"
