"""The invariants code keeps over a lesson a model proposed, whatever the person's phrasing.

The model judges meaning: whether a lesson lasts (its `kind`). Code keeps only what holds however a
person words it, and each guard only ever refuses:
- the quote is the person's own words: verbatim (after normalising case, spacing, quotes and
  Markdown) in their turns, pasted documents and tool output cut out, and not inside quotation
  marks or after someone else's "says", "thinks", "keeps saying" (someone else's words the person
  relays); a quote the model re-typed may stand on the
  person's sentence that holds most of its words, which then becomes the entry, and so may a
  lesson whose quote shares no word with it (the right lesson on the wrong quote);
- the person's later words on the same topic win: a quote the person came back to later in the
  conversation stands only when a later quote of theirs is proposed for the same lesson (that one
  is kept), or when the model, asked about exactly that, says the later words leave it standing:
  without that answer it is refused;
- a statement bound to a time ("until Friday", "this week", "tomorrow") is not lasting;
- no credential: the secret scanner, secrets told in prose included, passes the lesson, the quote
  and every word code writes beside it;
- no one-off detail (a commit id, an issue number, a count, a clock time) and no failure that may
  not happen again, in the lesson;
- most of the lesson's words are the conversation's own, so an invented lesson cannot ride on a
  good quote.
Procedures stand on commands the assistant really ran (see `procedures.py`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

import snowballstemmer

from ..store.secrets import find_secrets, secret_values
from .validate import tokens

KINDS = ("preference", "fact", "procedure", "one-off", "not-theirs")
LASTING_KINDS = frozenset({"preference", "fact", "procedure"})
MIN_QUOTE_WORDS = 3
LOCATE_SHARE, LOCATE_MIN = 0.6, 3  # of a quote's (or lesson's) topic words one of the person's sentences must hold
GROUNDED_SHARE = 0.5  # of a lesson's words that must be the conversation's own (person or assistant)
REVISIT_MIN = 2  # topic words a later sentence of the person shares with the quoted one to be about the same
NEAR_TURNS = 2  # the person's next turns, where one shared topic word is enough
EVIDENCE_CHARS = 300  # longest verbatim sentence written beside a lesson
QUOTED_SHARE = 0.5  # of a quote's words inside quotation marks for it to be someone else's
ALREADY_SAID = 0.8  # share of the sentence's words the lesson already holds: the sentence adds nothing

# Structural screens: the grammar of time limits, ids and counts, and failures. They only refuse.
TIME_BOUND = re.compile(
    r"\b(until|till|through|thru|before|by)\s+(the\s+end\s+of\s+)?(mon|tues|wednes|thurs|fri|satur|sun)day\b"
    r"|\b(until|till|through|thru)\s+(tomorrow|tonight|next|the\s+end|end\s+of|(the\s+)?\d|jan|feb|mar|apr|may|jun|jul|aug"
    r"|sep|oct|nov|dec)"
    r"|\b(this|next|coming)\s+(week|weekend|month|morning|afternoon|evening|sprint|quarter)\b"
    r"|\b(today|tonight|tomorrow|yesterday|for now|right now|at the moment|for the moment|temporar(y|ily)"
    r"|for the (next|coming) \w+ (days?|weeks?|hours?)|for (a|one|two|three) (days?|weeks?)"
    r"|just this once|this time only|only this time|for this one)\b", re.I)
ONE_OFF = re.compile(r"(\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"  # a commit id
                     r"|#\d+\b|\bpull/\d+"  # a PR or issue number
                     r"|\b\d[\d,]*\s+(tests?|users?|rows?|files?|lines?|commits?|records?|items?|errors?)\b)",  # a count
                     re.I)  # (not a clock time: "the night run starts at 01:30" lasts; "at 10:30 today" is bound to a time)
TRANSIENT = re.compile(r"(?<![-\w])(timed out|times out|timing out|timeouts? (error|exceeded)|"
                       r"(fails?|failed|failing|hit|hits|with) (a |the )?timeouts?|dns|name resolution|"
                       r"50[234]|outage|unavailable|flaky|blip|no space|disk (is )?full|out of disk|"
                       r"connection (reset|refused)|reset by peer)\b", re.I)
FIRST_PERSON = re.compile(r"\b(i|i'm|im|i've|i'd|me|my|mine|myself)\b", re.I)
QUOTED = re.compile(r"[\"“«]([^\"”»]{3,})[\"”»]")  # words inside quotation marks: someone else's, relayed
# The grammar of reported speech: someone other than the person (or "we", or "you" whom they answer)
# says, thinks or wants something; what follows is that someone's words, relayed.
REPORTED = re.compile(
    r"\b(?!(?:i|we|you|that|as|i've|i'd|i'm)\b)[\w'’]+\s+(?:(?:keeps?|kept)\s+(?:saying|telling\s+\w+|asking\s+\w+)"
    r"|says|said|thinks|insists|insisted|claims|claimed|argues|argued|reckons|suggested|suggests|recommended"
    r"|recommends|wrote|writes|told\s+\w+|tells\s+\w+|wants\s+(?:us|me|everyone|everybody)\s+to)\b"
    # someone's stated attribution: "according to Sam", "Lena's rule is"
    r"|\baccording\s+to\s+\w+|\b\w+['’]s\s+(?:rule|policy|preference|view|opinion|take)\s+is\b"
    # a person other than the speaker holds the preference: "my boss prefers", "the team lead wants"
    r"|\b(?:my|our|the|his|her|their)\s+(?:\w+\s+)?(?:boss|manager|lead|pm|cto|ceo|colleagues?|coworkers?|co-workers?"
    r"|teammates?|clients?|customers?|folks|people)\s+(?:prefers?|wants?|would\s+like|likes?|insists?|expects?"
    r"|demands?|requires?)\b", re.I)


@dataclass
class Turn:
    role: str  # person | assistant
    text: str  # person: their own words only (pasted documents cut out); assistant: answers and commands
    commands: list[str] = field(default_factory=list)  # assistant: what its tool calls ran, verbatim
    skills: list[str] = field(default_factory=list)  # assistant: skills it opened (skill_view)


@dataclass
class Said:
    """The conversation's turns as code judges quotes against them (tool output is never here)."""

    turns: list[Turn]
    _told: set[str] | None = field(default=None, repr=False, compare=False)

    def told_secrets(self) -> set[str]:
        """The secret values the conversation tells (the person's words, the assistant's answers and
        commands): anything written that holds one holds the secret, whatever surrounds it there."""
        if self._told is None:
            self._told = set().union(*(secret_values(t) for turn in self.turns for t in [turn.text, *turn.commands]))
        return self._told

    def holds_secret(self, text: str) -> bool:
        """A credential in `text` itself, or a value this conversation told as one."""
        return bool(find_secrets(text)) or any(v in text for v in self.told_secrets())

    def own_words(self) -> str:
        return " ".join(t.text for t in self.turns)

    def person(self) -> list[tuple[int, str]]:
        """(turn index, sentence) for every sentence of the person's own words."""
        return [(i, s) for i, t in enumerate(self.turns) if t.role == "person" for s in sentences(t.text)]

    def commands(self) -> list[str]:
        return [c for t in self.turns for c in t.commands]

    def skills_used(self) -> list[str]:
        return list(dict.fromkeys(s for t in self.turns for s in t.skills))


@dataclass
class Verdict:
    """Code's judgement of one candidate: kept, or why not."""

    quote: str
    lesson: str
    kind: str
    steps: list[str] = field(default_factory=list)
    why: str = ""  # empty: kept
    file: str = "MEMORY.md"
    turn: int = -1  # the person's turn the quote stands on (-1: the assistant's words, procedures only)
    sentence: str = ""  # the person's sentences the quote spans, verbatim
    located: bool = False  # the quote is the person's sentence code found for it (see `locate`)
    later: list[str] = field(default_factory=list)  # the person's later sentences on the same topic
    only_kind: bool = False  # every guard passed; only the model's kind (one-off) left it out

    @property
    def kept(self) -> bool:
        return not self.why

    @property
    def entry(self) -> str:
        """The memory entry: the person's own sentence when code found it for a re-typed quote;
        else the lesson, with the person's verbatim sentence when it adds to it."""
        if self.located:
            return f"The user said: “{self.sentence}”"
        s = self.sentence
        have = stems(self.lesson)
        if s and len(s) <= EVIDENCE_CHARS and not find_secrets(s) and \
                len(stems(s) - have) > (1 - ALREADY_SAID) * len(stems(s)):
            return f"{self.lesson} (the user: “{s}”)"
        return self.lesson


def norm(text: str) -> str:
    """Case, spacing, quotes, Markdown emphasis and the punctuation at either end do not count."""
    t = str(text).replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    t = re.sub(r"[`*_\"]", "", t)
    return " ".join(t.lower().split()).strip(" .,;:!?'()")


# A sentence ends at . ! ? or a line break; so does a clause set off by a dash, which in chat is how
# one long message strings independent statements together ("redo the chart — and use the
# colour-blind palette like always — then export it"). A dot inside a name or a version ends
# nothing; a hyphen inside a word or an option (pip --user) is no dash; a semicolon joins what
# belongs together ("No root here; stick to user-level installs").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+|\s+(?:[—–]|--?)\s+")
# A long aside in parentheses is a statement of its own ("(Dana keeps saying we should move the
# wiki to Notion)"); a short one is part of its sentence ("user-level installs (pipx, pip --user)").
_ASIDE = re.compile(r"\s*\(([^()]*)\)")
ASIDE_WORDS = 6


def sentences(text: str) -> list[str]:
    """The sentences of a turn, verbatim: each clause set off by a dash, and each long aside in
    parentheses, is one."""
    out: list[str] = []
    for part in _SENTENCE_END.split(str(text)):
        out.extend(_asides(part))
    return [p for p in out if p and p.strip(" ,.;:")]


def _asides(part: str) -> list[str]:
    """`part` with its long parenthesised asides taken out as pieces of their own, in order."""
    pieces, at = [], 0
    for m in _ASIDE.finditer(part):
        if len(m.group(1).split()) >= ASIDE_WORDS:
            pieces += [part[at:m.start()], m.group(1)]
            at = m.end()
    pieces.append(part[at:])
    return [p.strip().lstrip(",;: ") if n else p.strip() for n, p in enumerate(pieces) if p.strip()]


_STEMMER = threading.local()


def stems(text: str) -> set[str]:
    """Topic words, each as its Snowball stem ("hourly" and "hours" are one word)."""
    stemmer = getattr(_STEMMER, "english", None)
    if stemmer is None:  # a stemmer keeps state while it works: one per thread
        stemmer = _STEMMER.english = snowballstemmer.stemmer("english")
    return set(stemmer.stemWords(sorted(tokens(text))))


def judge(quote: str, lesson: str, kind: str, steps: list[str], conv: Said) -> Verdict:
    """Every guard, in turn; the first that refuses says why."""
    kind = kind.strip().lower() if kind.strip().lower() in KINDS else "one-off"
    v = Verdict(" ".join(quote.split()), " ".join(lesson.split()), kind, [" ".join(s.split()) for s in steps])
    if kind == "not-theirs":
        v.why = "the model judged it not-theirs, not something lasting"
        return v
    for guard in (_place, _no_secret, _not_relayed, _not_revisited, _not_time_bound, _not_one_off, _grounded):
        why = guard(v, conv)
        if why:
            v.why = why
            return v
    v.file = "USER.md" if kind == "preference" or FIRST_PERSON.search(v.sentence) else "MEMORY.md"
    if kind not in LASTING_KINDS:  # the model's judgement of meaning; lessons.py may ask it again
        v.why, v.only_kind = f"the model judged it {kind}, not something lasting", True
    return v


def _place(v: Verdict, conv: Said) -> str:
    """Find the quote in the person's words (or, for a procedure, in the assistant's answers and
    commands); else the person's one sentence that holds most of its words."""
    found = find_quote(v.quote, conv, "person")
    if found is not None:
        v.turn = found
        v.sentence = sentence_around(conv.turns[found].text, v.quote)
        if v.kind == "procedure" or stems(v.lesson) & stems(v.sentence):
            return ""
        # the quote does not show the lesson (not one word in common): the sentence that does, if any
        placed = locate([v.lesson], conv)
        if placed is None:
            return "its quote does not show its lesson (they share no word)"
        v.turn, v.sentence, v.located = placed[0], placed[1], True
        return ""
    if v.kind == "procedure" and find_quote(v.quote, conv, "assistant") is not None:
        return ""  # a procedure stands on its commands (procedures.py), not on the quote
    placed = locate([v.quote, v.lesson], conv)
    if placed is None:
        return ("its quote is not the person's own words (the assistant's, a tool's output, a pasted text, "
                "or made up)")
    v.turn, v.sentence, v.located = placed[0], placed[1], v.kind != "procedure"
    return ""


def _not_relayed(v: Verdict, conv: Said) -> str:
    """Words the person puts in quotation marks, or after someone else's "says", "told us" or
    "keeps saying", are that someone's, relayed."""
    if v.turn < 0:
        return ""
    q = norm(v.quote if not v.located else v.sentence)
    for m in QUOTED.finditer(conv.turns[v.turn].text):
        inner = norm(m.group(1))
        # the quote lies in the marks, or the marks hold most of it: a phrase in marks inside the
        # person's own sentence (i won't just "buy more ram") leaves the sentence theirs
        if inner and (q in inner or (len(inner.split()) >= MIN_QUOTE_WORDS and inner in q
                                     and len(inner.split()) >= QUOTED_SHARE * len(q.split()))):
            return "someone else's words, which the person quoted"
    if reported(v.sentence, "" if v.located else v.quote):
        return "someone else's words, which the person relayed"
    return ""


def reported(sentence: str, quote: str = "") -> bool:
    """The sentence reports someone else's words before the quote ends (anywhere, with no quote)."""
    text, q = norm(sentence), norm(quote)
    at = text.find(q) if q else -1
    end = at + len(q) if at >= 0 else len(text)
    return any(m.start() < end for m in REPORTED.finditer(text))


def _not_revisited(v: Verdict, conv: Said) -> str:
    """The person's last word on a topic wins: what they said of it later is kept beside the
    verdict; the lesson then stands only if a later quote of theirs is the one kept, or the model,
    asked about exactly that, says their later words leave it standing (see lessons.py)."""
    if v.turn >= 0:
        v.later = revisits(conv, v.turn, v.sentence)
    return ""


def revisits(conv: Said, turn: int, sentence: str) -> list[str]:
    """The person's sentences after `turn` on the topic of `sentence`: sharing at least REVISIT_MIN
    of its topic words, or one in the person's next NEAR_TURNS turns (which answer what was done
    about it)."""
    want = stems(sentence)
    near = [i for i in range(turn + 1, len(conv.turns)) if conv.turns[i].role == "person"][:NEAR_TURNS]
    return [s for i, s in conv.person() if i > turn and (
        len(want & stems(s)) >= REVISIT_MIN or (i in near and want & stems(s)))]


def _not_time_bound(v: Verdict, conv: Said) -> str:
    """A procedure stands on its commands: the time in the person's sentence around it ("the third
    time this quarter I've fumbled it") is not a limit on the steps; its lesson still counts."""
    for text in ((v.lesson,) if v.kind == "procedure" else (v.sentence, v.lesson)):
        if TIME_BOUND.search(text):
            return "it is bound to a time (it does not last)"
    return ""


def _no_secret(v: Verdict, conv: Said) -> str:
    texts = [v.lesson, v.quote] + ([v.sentence] if v.located else [])
    # a step holding a value the conversation told as a secret is left out of the skill (kept_steps)
    if any(conv.holds_secret(t) for t in texts) or any(find_secrets(s) for s in v.steps):
        return "it holds a credential"
    return ""


def _not_one_off(v: Verdict, conv: Said) -> str:
    if ONE_OFF.search(v.lesson):
        return "it carries a one-off detail (an id, a number, a count or a time)"
    if v.kind != "procedure" and TRANSIENT.search(v.lesson):
        return "it describes a failure that may not happen again"
    return ""


def _grounded(v: Verdict, conv: Said) -> str:
    """Most of the lesson's words are the conversation's own (compared by stem; a procedure's
    include the commands the assistant ran)."""
    words = stems(v.lesson)
    if v.located or not words:
        return "" if v.located else "its lesson says nothing"
    said = conv.own_words() + (" " + " ".join(conv.commands()) if v.kind == "procedure" else "")
    if len(words & stems(said)) < GROUNDED_SHARE * len(words):
        return "its words are not the conversation's (invented, or taken from a tool's output)"
    return ""


def find_quote(quote: str, conv: Said, role: str) -> int | None:
    """The first turn of `role` holding the quote; pieces around an ellipsis each must be found."""
    pieces = [norm(p) for p in re.split(r"\.\.\.|…", quote) if norm(p)]
    if not pieces or sum(len(p.split()) for p in pieces) < MIN_QUOTE_WORDS:
        return None
    for i, t in enumerate(conv.turns):
        text = norm(t.text + ("\n" + "\n".join(t.commands) if role == "assistant" else ""))
        if t.role == role and all(p in text for p in pieces):
            return i
    return None


def locate(probes: list[str], conv: Said) -> tuple[int, str] | None:
    """One sentence of the person's own words that holds most of a probe's topic words: the
    model's quote, then its lesson. Returns (turn index, sentence)."""
    places = [(i, s, stems(s)) for i, s in conv.person()]
    for probe in probes:
        want = stems(probe)
        if not want:
            continue
        scored = sorted(((len(want & has), len(want & has) / max(1, len(has)), i, s) for i, s, has in places),
                        key=lambda x: (x[0], x[1]), reverse=True)
        if not scored:
            continue
        best = scored[0]
        # a short probe (fewer topic words than LOCATE_MIN) needs all of them, in one sentence only
        least = LOCATE_MIN if len(want) >= LOCATE_MIN else len(want)
        alone = len(want) >= LOCATE_MIN or len(scored) < 2 or scored[1][0] < best[0]
        if best[0] >= least and best[0] >= LOCATE_SHARE * len(want) and alone:
            return best[2], best[3]
    return None


def sentence_around(text: str, quote: str) -> str:
    """The sentences of `text` the quote spans, verbatim: from the first to the last that holds a
    piece of it."""
    parts = sentences(text)
    q = f" {norm(quote)} "
    pieces = [norm(p) for p in sentences(quote)]
    hit = [n for n, s in enumerate(parts) if norm(s) and (
        f" {norm(s)} " in q or any(p and (p == norm(s) or (len(p.split()) >= MIN_QUOTE_WORDS and p in norm(s))
                                   or norm(s) in p) for p in pieces))]
    if not hit:
        return " ".join(quote.split())
    return " ".join(parts[hit[0]:hit[-1] + 1])
