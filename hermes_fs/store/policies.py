"""The choices of learned changes (policy, review mode), apart from hermes.yaml's loader so that
the command line can offer them without importing YAML and the settings dataclasses."""

from __future__ import annotations

from enum import StrEnum


class Policy(StrEnum):
    """What happens to a learned change once it is committed on its branch."""

    REVIEW = "review"  # wait for `hermes-fs review merge`
    AUTO = "auto"  # merge now
    ADDITIONS = "additions"  # merge only pure additions; hold edits and removals


class ReviewMode(StrEnum):
    """How the reviewer model answers: by calling edit tools, or with one schema-constrained document."""

    TOOLS = "tools"
    STRUCTURED = "structured"  # for models that cannot call tools well (small local ones)
