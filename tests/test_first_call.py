"""What the true first call pays for (bench/first_call_breakdown.py): the turns-only daemon `run`
starts loads the turn's code and not the inbox's, jobs' or channels' (it never runs them);
litellm's import-time objects are put out of the collector's reach once imported; the libc
function behind atomic file swaps is found on first use, not at every process start. Each is
checked in a real process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hermes_fs.store.files import swap_in

NOT_IN_A_TURNS_ONLY_DAEMON = ("hermes_fs.service.inbox", "hermes_fs.service.requests", "hermes_fs.service.gateway",
                              "hermes_fs.service.scheduler", "hermes_fs.service.sync", "hermes_fs.store.claims",
                              "asyncio")


def _python(code: str, *args: str) -> str:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HERMES_NO_WARM_UP": "1"})
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_turns_only_daemon_loads_the_turn_but_no_inbox_job_or_channel_code(vault):
    code = """
import sys
from pathlib import Path
from hermes_fs.store.vault import Vault
from hermes_fs.service.daemon import Daemon, DaemonOptions
from hermes_fs.agent.conversation import Conversation  # what its warm-up loads for the first turn
d = Daemon(Vault(Path(sys.argv[1])), DaemonOptions(turns_only=True))
assert d.executor is None
print(sorted(m for m in sys.modules if m.startswith(tuple(sys.argv[2:]))))
"""
    assert _python(code, str(vault.root), *NOT_IN_A_TURNS_ONLY_DAEMON) == "[]"


def test_a_full_daemon_still_has_its_job_queue_and_inbox(vault):
    code = """
import sys
from pathlib import Path
from hermes_fs.store.vault import Vault
from hermes_fs.service.daemon import Daemon, DaemonOptions
d = Daemon(Vault(Path(sys.argv[1])), DaemonOptions())
d._scan_inbox()
print(d.executor is not None, "hermes_fs.service.inbox" in sys.modules)
d.executor.shutdown(wait=True)
"""
    assert _python(code, str(vault.root)) == "True True"


@pytest.mark.slow
def test_litellms_objects_are_frozen_out_of_the_collector_and_collection_goes_on():
    code = """
import gc
from hermes_fs.agent.model import import_litellm
before = gc.get_freeze_count()
litellm = import_litellm()
frozen = gc.get_freeze_count()
import_litellm()  # a second call (every model call makes one) freezes nothing more
print(before == 0, frozen > 100_000, gc.get_freeze_count() == frozen, gc.isenabled(), litellm.suppress_debug_info)
"""
    assert _python(code) == "True True True True True"


def test_a_swap_returns_what_was_there_and_creates_what_was_not(tmp_path):
    target = tmp_path / "MEMORY.md"
    assert swap_in(target, b"first") is None
    assert swap_in(target, b"second") == b"first"
    assert target.read_bytes() == b"second"
    assert swap_in(target, None) == b"second" and not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary file left behind


@pytest.mark.slow
def test_a_plain_call_does_not_load_litellms_proxy_but_files_are_still_mapped():
    code = """
import sys
from hermes_fs.agent.model import import_litellm
litellm = import_litellm()
update = litellm.main.update_messages_with_model_file_ids
plain = [{"role": "user", "content": "hi"}]
print(update(plain, model_id=None, model_file_id_mapping={}) is plain, "litellm.proxy._types" in sys.modules)
parts = [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-abc"}}]}]
update(parts, model_id=None, model_file_id_mapping={})
print("litellm.proxy._types" in sys.modules, parts[0]["content"][0]["file"]["file_id"])
"""
    assert _python(code) == "True False\nTrue file-abc"


@pytest.mark.slow
def test_a_streamed_call_is_priced_from_its_usage_without_pricing_the_stream_at_its_start(model_server):
    model_server.add({"content": "hello"})
    code = f"""
import sys
from hermes_fs.agent.model import LiteLLMModel, ModelSettings
settings = ModelSettings(model="openai/gpt-4o-mini", api_base="{model_server.api_base}", api_key_env="HERMES_TEST_KEY")
reply = LiteLLMModel(settings).complete([{{"role": "user", "content": "hi"}}], [], on_text=lambda t: None)
enc = sys.modules.get("litellm.litellm_core_utils.default_encoding")
print(reply.content, reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.cost_usd > 0, enc is None)
"""
    assert _python(code) == "hello 11 7 True True"
