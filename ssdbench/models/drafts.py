"""What `--draft` names: a model of its own, the target made cheaper, or no model at all.

Each kind says where its weights come from and what it can run on; the model set builds it,
the methods only ask whether there is a model. Adding a draft kind is one entry here plus
its builder in model_set.py (docs/DESIGN.md §8).
"""

from __future__ import annotations

from dataclasses import dataclass

SELF_INT8 = "self-int8"
NGRAM = "ngram"
SELF_SKIP = "self-skip"


@dataclass(frozen=True)
class DraftKind:
    name: str
    summary: str
    has_model: bool  # False: proposals come from a lookup, not a forward
    from_target: bool  # built from the target's own checkpoint
    engines: tuple[str, ...]  # engines it can be built on
    may_propose_fewer: bool = False  # a lookup may find no match: fewer than K tokens a round, even none


KINDS = {kind.name: kind for kind in (
    DraftKind("model", "a model of its own (a path, .gguf, repo id or alias), sharing the target's vocabulary",
              has_model=True, from_target=False, engines=("native", "hf")),
    DraftKind(SELF_INT8, "the target with weight-only int8 projections", has_model=True, from_target=True,
              engines=("native", "hf")),
    DraftKind(NGRAM, "prompt lookup: continue the latest earlier match of the text's suffix (no model)",
              has_model=False, from_target=False, engines=("native", "hf"), may_propose_fewer=True),
    DraftKind(SELF_SKIP, "the target with some decoder layers skipped: 'self-skip:auto' (chosen by a short "
              "calibration on the suite) or 'self-skip:3,5,7'", has_model=True, from_target=True, engines=("native",)),
)}


@dataclass(frozen=True)
class DraftChoice:
    """A parsed `--draft`: its kind and, for a model of its own, the spec to resolve."""

    spec: str
    kind: str
    skip_layers: tuple[int, ...] | None = None  # self-skip: the layers left out; None until calibrated (auto)

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
    def needs_calibration(self) -> bool:
        """self-skip:auto: the layers are chosen on the run's prompts once the target is loaded."""
        return self.kind == SELF_SKIP and self.skip_layers is None

    @property
    def model_spec(self) -> str | None:
        """The spec to resolve for a draft with weights of its own; None otherwise."""
        return self.spec if self.kind == "model" else None


def parse_draft(spec: str) -> DraftChoice:
    """`--draft` as given: a named kind (self-skip with its layers), or else a model spec."""
    name = spec.strip()
    if name.partition(":")[0].strip() == SELF_SKIP:
        from ssdbench.models.self_skip import AUTO, parse_self_skip

        layers = parse_self_skip(name)
        return DraftChoice(spec=name, kind=SELF_SKIP, skip_layers=None if layers == AUTO else layers)
    return DraftChoice(spec=name, kind=name if name in KINDS and name != "model" else "model")
