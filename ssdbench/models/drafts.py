"""What `--draft` names: a model of its own, the target made cheaper, or no model at all.

Each kind says where its weights come from and what it can run on; the model set builds it,
the methods only ask whether there is a model. Adding a draft kind is one entry here plus
its builder in model_set.py (docs/DESIGN.md §8).
"""

from __future__ import annotations

from dataclasses import dataclass

SELF_INT8 = "self-int8"
NGRAM = "ngram"


@dataclass(frozen=True)
class DraftKind:
    name: str
    summary: str
    has_model: bool  # False: proposals come from a lookup, not a forward
    from_target: bool  # built from the target's own checkpoint
    engines: tuple[str, ...]  # engines it can be built on


KINDS = {kind.name: kind for kind in (
    DraftKind("model", "a model of its own (a path, .gguf, repo id or alias), sharing the target's vocabulary",
              has_model=True, from_target=False, engines=("native", "hf")),
    DraftKind(SELF_INT8, "the target with weight-only int8 projections", has_model=True, from_target=True,
              engines=("native", "hf")),
    DraftKind(NGRAM, "prompt lookup: continue the latest earlier match of the text's suffix (no model)",
              has_model=False, from_target=False, engines=("native", "hf")),
)}


@dataclass(frozen=True)
class DraftChoice:
    """A parsed `--draft`: its kind and, for a model of its own, the spec to resolve."""

    spec: str
    kind: str

    @property
    def info(self) -> DraftKind:
        return KINDS[self.kind]

    @property
    def has_model(self) -> bool:
        return self.info.has_model

    @property
    def from_target(self) -> bool:
        return self.info.from_target

    @property
    def int8(self) -> bool:
        return self.kind == SELF_INT8

    @property
    def model_spec(self) -> str | None:
        """The spec to resolve for a draft with weights of its own; None otherwise."""
        return self.spec if self.kind == "model" else None


def parse_draft(spec: str) -> DraftChoice:
    """`--draft` as given: a named kind, or else a model spec."""
    name = spec.strip()
    return DraftChoice(spec=name, kind=name if name in KINDS and name != "model" else "model")
