"""The checks of a run's models that need their configs and weight headers but no weights loaded.

`run` (session.prepare) and `validate` both call `check_models`, so the two can never disagree
about whether a target/draft pair resolves, fits the context and shares a vocabulary.
"""

from __future__ import annotations

from ssdbench.models.drafts import SELF_SKIP
from ssdbench.models.build import check_skip_layers
from ssdbench.models.model_set import ModelSet
from ssdbench.run.limits import check_new_tokens, context_limit
from ssdbench.run.plan import RunPlan


def check_models(plan: RunPlan, models: ModelSet) -> int | None:
    """Sources resolve, new tokens and drafts leave the context a position, weight files match their
    configs, target and draft share a vocabulary, self-skip's layers exist, a --tp split divides the
    target. Returns the run's context limit (None when no model declares one)."""
    models.target_source, models.draft_source  # noqa: B018 - resolving is the check
    limit = context_limit(models)
    check_new_tokens(plan, limit)  # before loading the tokenizer: 10^8 new tokens is refused at once
    models.check_vocabularies()
    models.check_weights()
    check_self_skip_layers(plan, models)
    if plan.models.tp > 1:
        models.target_shape.tensor_parallel_shard(plan.models.tp)  # refused before anything is claimed or started
    return limit


def check_self_skip_layers(plan: RunPlan, models: ModelSet) -> None:
    """Layers given to self-skip exist in the target (self-skip:auto chooses its own later)."""
    if plan.draft.kind == SELF_SKIP and plan.draft.skip_layers is not None:
        check_skip_layers(models.num_layers, plan.draft.skip_layers)
