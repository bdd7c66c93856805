"""The daemon builds the skill vectors (skills.embeddings) in the background, so no turn waits for them.

The first ranking of a 1,000-skill vault by meaning encodes about 3,800 texts: minutes on a small
machine for the model's vectors, seconds for the static ones once their token table is built (a
minute, once, in a child process at low priority: the transformer's weights never enter the
daemon). A turn never encodes skills (mind/search.py `semantic` ranks with the vectors that are
ready and says in the log when some are missing); this part fills the cache in one thread: at
start and when a skill changes (after a quiet moment, so a burst of edits is one pass), and only
while the skills index is over its budget (below it nothing is ranked, so nothing is built). It
runs when the setting is on at the daemon's start (turned on later: from the next start; turned
off: it idles). The model is loaded by the fill too (in the model worker), so the first warm turn finds it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from ..mind import embeddings, static_vectors
from ..mind.search import fill_vectors, over_budget
from .host import DaemonHost
from .priority import AGENT_NICE, lower_this_thread

QUIET_S = 2.0  # after a skill changes, wait this long without further changes before encoding
RETRY_S = 60.0  # another process was filling: look again this much later
FILL_NICE = AGENT_NICE + 5  # the daemon's turns, and any agent work, come before the fill


class SkillVectorsService:
    name = "skill vectors"

    def __init__(self, daemon: DaemonHost):
        self.daemon = daemon
        self.stopped = threading.Event()
        self.wanted = threading.Event()
        self.last_poke = 0.0
        self.thread: threading.Thread | None = None
        self.passes = 0  # finished fills, for tests and `status`

    def start(self) -> None:
        self.wanted.set()
        self.thread = threading.Thread(target=self._run, name="skill-vectors", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.wanted.set()
        if self.thread:
            self.thread.join(timeout=60)  # a batch (about 50 texts) is the longest it can take

    def skills_changed(self) -> None:
        """A skill file changed, or hermes.yaml did: fill again once things are quiet."""
        self.last_poke = time.monotonic()
        self.wanted.set()

    def _run(self) -> None:
        lower_this_thread(FILL_NICE)  # below agent work (turns: AGENT_NICE)
        first = True
        while not self.stopped.is_set():
            self.wanted.wait()
            if self.stopped.is_set():
                return
            if not first:
                while (quiet := QUIET_S - (time.monotonic() - self.last_poke)) > 0:
                    if self.stopped.wait(quiet):
                        return
            first = False
            self.wanted.clear()
            skills = self.daemon.vault.config.skills
            if not embeddings.wanted(skills.embeddings) or not over_budget(self.daemon.vault.root, skills.prompt_budget_chars):
                continue
            self._fill()

    def _fill(self) -> None:
        t0 = time.monotonic()
        root = self.daemon.vault.root
        try:
            if not static_vectors.is_built(root / ".hermes") and not self._build_table():
                return
            embeddings.warm()  # loaded off any turn's path (in the model worker, by its first batch)
            done = fill_vectors(root, stop=self.stopped, build_table=False)
        except Exception as exc:  # a broken install or database: reported, the daemon goes on
            self.daemon.error(f"skill vectors not built: {type(exc).__name__}: {exc}")
            return
        if done is None:  # `skills embed` or a CLI's background fill: look again later
            self.daemon.note("skill vectors: another process is building them; looking again in a minute")
            retry = threading.Timer(RETRY_S, self.skills_changed)
            retry.daemon = True
            retry.start()
        elif done:
            self.daemon.note(f"skill vectors: encoded {done} skill(s) in {time.monotonic() - t0:.1f} s")
        self.passes += 1

    def _build_table(self) -> bool:
        """`hermes-fs skills embed --table` in a child process at low priority, waited for (stopped
        with the daemon); whether the table is there afterwards."""
        root = self.daemon.vault.root
        log_path = self.daemon.vault.state_dir / "logs" / "static-vectors.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as out:
            proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(root), "skills", "embed",
                                     "--background", "--table"], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=root)
        while proc.poll() is None:
            if self.stopped.wait(0.5):
                proc.terminate()
                proc.wait(timeout=10)
                return False
        if proc.returncode != 0 or not static_vectors.is_built(root / ".hermes"):
            self.daemon.error(f"skill vectors: the static token table was not built (exit {proc.returncode}; see {log_path})")
            return False
        self.daemon.note("skill vectors: static token table built")
        return True
