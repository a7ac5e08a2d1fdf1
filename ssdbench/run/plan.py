"""The run plan: a run's settings resolved once into what every layer below needs.

Methods come from the registry, the draft is parsed, placements and ssd's fan-out policy are
computed (a geometric fan-out reads its fitted run here, once), and every combination that
cannot run is refused here with one line. Session, execution, limits and sweep read the plan;
nothing below the run layer sees the raw settings (docs/DESIGN.md §8).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from ssdbench.decoding.recorder import Recorder
from ssdbench.decoding.workload import DecodeSettings, Workload
from ssdbench.endpoints.runner import EndpointRun
from ssdbench.errors import UsageError
from ssdbench.methods.base import Method, MethodContext, TRANSFORMERS
from ssdbench.methods.registry import get_method
from ssdbench.models.drafts import SELF_SKIP, DraftChoice, parse_draft
from ssdbench.models.memory_plan import MAX_TREE_TOKENS
from ssdbench.models.model_set import ModelSet, ModelSettings
from ssdbench.models.tensor_parallel import rank_device
from ssdbench.profiling.devices import check_device
from ssdbench.profiling.placement import Placement, check_disjoint, default_placements, parse_placement
from ssdbench.projection.theory import geometric_fan_out
from ssdbench.run.fit import AcceptanceFit, needs_fit, require_fit_from
from ssdbench.run.settings import RunSettings
from ssdbench.sampling.params import SamplingParams
from ssdbench.sampling.acceptance_setting import parse_acceptance
from ssdbench.speculation.fan_out import FanOut, build_fan_out
from ssdbench.speculation.mailbox import check_store_order
from ssdbench.speculation.policy import SsdPolicy



@dataclass(frozen=True)
class Variant:
    """One method on one engine: a column of every table."""

    method: Method
    engine: str

    @property
    def name(self) -> str:
        return self.method.name

    @property
    def label(self) -> str:
        return self.method.label(self.engine)

    @property
    def key(self) -> tuple[str, str]:
        return self.method.name, self.engine


@dataclass(frozen=True)
class SuiteRequest:
    name: str
    data_dir: Path | None
    num_prompts: int | None  # None: all
    chat_template: bool
    truncate_prompts: str  # none | left


@dataclass(frozen=True)
class RunPlan:
    settings: RunSettings  # as given: recorded in the manifest, read by nothing else
    methods: tuple[Method, ...]
    variants: tuple[Variant, ...]
    decode: DecodeSettings
    order: str
    suite: SuiteRequest
    models: ModelSettings
    draft: DraftChoice
    target_placement: Placement
    draft_placement: Placement
    pins_target: bool  # a method drafts in its own process, or --target-device was given
    ssd: SsdPolicy | None
    threads: int | None
    timeline: bool
    out: Path | None
    endpoints: EndpointRun | None = None  # serving engines run beside the methods (--endpoint), once probed

    @property
    def pinned(self) -> Placement | None:
        """The target's placement where the run pins it; every in-process variant runs under it."""
        return self.target_placement if self.pins_target else None

    @property
    def draft_slack(self) -> int:
        """Positions past prompt + new tokens that drafts write, for the widest method of the run."""
        return max((m.draft_slack(self.decode.k) for m in self.methods), default=0)

    @property
    def loads_draft_model(self) -> bool:
        return self.draft.has_model and any(m.uses_draft for m in self.methods)

    @property
    def runs_round_loop_natively(self) -> bool:
        return "native" in self.models.engines and any(not m.is_baseline for m in self.methods)

    @property
    def own_process(self) -> bool:
        return any(m.own_process for m in self.methods)

    def with_decode(self, **changes) -> RunPlan:
        """The same plan with other decode settings (the limits' search for what fits)."""
        return dataclasses.replace(self, decode=dataclasses.replace(self.decode, **changes))

    def method_context(self, engine: str, models: ModelSet, workload: Workload,
                       recorder: Recorder | None = None) -> MethodContext:
        placement = self.pinned.describe() if self.pinned else {
            "spec": self.settings.device, "cores": None, "threads": self.threads or "torch default"}
        return MethodContext(engine=engine, models=models, workload=workload, decode=self.decode, draft=self.draft,
                             draft_placement=self.draft_placement, ssd=self.ssd, recorder=recorder,
                             baseline_placement=placement)


def build_plan(settings: RunSettings, *, fit: AcceptanceFit | None = None) -> RunPlan:
    """Resolve and check everything that needs no model: methods, draft, engines, devices, ssd policy. Reads no
    earlier run: `--fan-out geometric` plans with the `fit` made first (run/fit.py:fit_for)."""
    methods = tuple(get_method(name) for name in settings.methods)
    draft = parse_draft(settings.draft)
    _check_methods(methods, draft, settings.engines)
    if settings.random_weights:
        _check_random_weights(methods, settings.engines)
    own_process = any(m.own_process for m in methods)
    target_place, draft_place = placements(settings, own_process=own_process)
    if settings.tp > 1:
        _check_tensor_parallel(methods, draft, settings.engines, device=target_place.device, tp=settings.tp,
                               dtype=settings.dtype)
    decode = DecodeSettings(
        k=settings.k, max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
        repeats=settings.repeats, seed=settings.seed, ignore_eos=settings.ignore_eos,
        target=SamplingParams(temperature=settings.temperature, top_p=settings.top_p),
        draft=SamplingParams(temperature=settings.temperature if settings.draft_temperature is None
                             else settings.draft_temperature, top_p=settings.top_p),
        synthetic=parse_acceptance(settings.acceptance),
    )
    _check_synthetic_proposals(decode, draft, methods)
    ssd = ssd_policy(settings, fit) if own_process else None  # ssd is the method with a draft process of its own
    if ssd is not None:
        _check_tree_size(settings.k, ssd.fan_out)
        check_store_order()
    sd_draft_device = _sd_draft_device(settings, methods, draft)
    models = ModelSettings(target=settings.target, draft=draft, dtype=settings.dtype, attention=settings.attention,
                           linear_kernel=settings.linear_kernel, int8_kernel=settings.int8_kernel,
                           device=target_place.device, engines=settings.engines,
                           allow_download=settings.allow_download, trust_remote_code=settings.trust_remote_code,
                           random_weights=settings.random_weights, seed=settings.seed, tp=settings.tp,
                           threads=settings.threads, k=settings.k, draft_device=sd_draft_device,
                           cuda_graphs=_cuda_graphs(settings, target_place.device, draft_place.device,
                                                    *([sd_draft_device] if sd_draft_device else [])))
    suite = SuiteRequest(name=settings.suite, data_dir=settings.data_dir, num_prompts=settings.num_prompts,
                         chat_template=settings.chat_template, truncate_prompts=settings.truncate_prompts)
    return RunPlan(settings=settings, methods=methods, variants=_variants(methods, settings.engines), decode=decode,
                   order=settings.order, suite=suite, models=models, draft=draft, target_placement=target_place,
                   draft_placement=draft_place, pins_target=own_process or settings.target_device is not None,
                   ssd=ssd, threads=settings.threads, timeline=settings.timeline, out=settings.out)


def _check_methods(methods: tuple[Method, ...], draft: DraftChoice, engines: tuple[str, ...]) -> None:
    for method in methods:
        if method.needs_draft_model and not draft.has_model:
            raise UsageError(f"{method.name} needs a draft model (its speculator drafts trees); "
                             f"--draft {draft.spec} has none")
        # baselines run transformers' models: their draft must build on the hf engine
        needed = {"hf"} if method.is_baseline else set(engines) & set(method.engines)
        if method.uses_draft and draft.has_model and not needed <= set(draft.info.engines):
            raise UsageError(f"{method.name} cannot use --draft {draft.spec}: that draft builds on the "
                             f"{' or '.join(draft.info.engines)} engine only")
        if not method.is_baseline and not set(method.engines) & set(engines):
            raise UsageError(f"{method.name} runs on the {' or '.join(method.engines)} engine only (tree attention); "
                             f"add --engine {method.engines[0]}")


def _check_synthetic_proposals(decode: DecodeSettings, draft: DraftChoice, methods: tuple[Method, ...]) -> None:
    """Synthetic acceptance times rounds of K drafted tokens at a made-up rate: a draft that may propose
    fewer (none, where the n-gram lookup finds no match) would time rounds that drafted nothing."""
    if decode.synthetic is None or not draft.info.may_propose_fewer or not any(m.uses_draft for m in methods):
        return
    raise UsageError(f"--acceptance {decode.synthetic.label} needs K={decode.k} drafted tokens every round, but "
                     f"--draft {draft.spec} may propose fewer (none where the text has no earlier match); "
                     "use a draft model (e.g. --draft self-int8) or --acceptance exact")


def _check_random_weights(methods: tuple[Method, ...], engines: tuple[str, ...]) -> None:
    """Random weights are built by the native engine only: no transformers model exists to run."""
    _require_native_only("--random-weights builds native models only", methods, engines)


def _require_native_only(why: str, methods: tuple[Method, ...], engines: tuple[str, ...]) -> None:
    """One line unless every variant runs on the native engine (no --engine hf, no transformers baseline)."""
    if set(engines) != {"native"}:
        raise UsageError(f"{why}; use --engine native")
    baselines = [m.name for m in methods if m.is_baseline]
    if baselines:
        raise UsageError(f"{why}: {', '.join(baselines)} runs transformers' own model; drop it from --methods")


def _cuda_graphs(settings: RunSettings, *devices: str) -> str:
    """--cuda-graphs, checked against the devices ("on" needs CUDA; graphs do not cover split targets)."""
    from ssdbench.models.cuda_graphs import uses_cuda_graphs

    if settings.cuda_graphs == "on" and settings.tp > 1:
        raise UsageError("--cuda-graphs on does not cover a --tp target yet; use --cuda-graphs auto or off")
    if settings.cuda_graphs == "on" and not any(uses_cuda_graphs("auto", d) for d in devices):
        uses_cuda_graphs("on", devices[0])  # the one-line refusal
    return settings.cuda_graphs


TENSOR_PARALLEL_DTYPES = ("float32", "bfloat16")  # what --tp's help promises


def _check_tensor_parallel(methods: tuple[Method, ...], draft: DraftChoice, engines: tuple[str, ...], *,
                           device: str, tp: int, dtype: str) -> None:
    """A tensor-parallel target is a native model split over processes: nothing may need it whole;
    on CUDA its ranks take `tp` consecutive GPUs from the target's."""
    if dtype not in TENSOR_PARALLEL_DTYPES:
        raise UsageError(f"--tp {tp} splits float32 or bfloat16 weights, not --dtype {dtype}; use --dtype bfloat16 "
                         "or --tp 1")
    if torch.device(device).type == "cuda":
        check_device(rank_device(device, tp - 1), flag=f"--tp {tp} (its last rank)")
    _require_native_only("--tp splits the native engine's target", methods, engines)
    if draft.kind == SELF_SKIP:
        raise UsageError("--tp: the self-skip draft shares the target's layers, which are split over ranks; "
                         "use another --draft")


def _sd_draft_device(settings: RunSettings, methods: tuple[Method, ...], draft: DraftChoice) -> str | None:
    """--sd-draft-device, checked: a GPU for a draft model of its own weights, run on the native engine."""
    spec = settings.sd_draft_device
    if spec is None:
        return None
    if not any(m.uses_draft and not m.own_process and not m.is_baseline for m in methods):
        raise UsageError(f"--sd-draft-device {spec}: no method of this run drafts in the target's process (sd does)")
    if not draft.has_model or draft.kind == SELF_SKIP:
        raise UsageError(f"--sd-draft-device: the {draft.kind} draft has no weights of its own to move; "
                         "use a draft model or self-int8")
    if "hf" in settings.engines:
        raise UsageError("--sd-draft-device places the native engine's draft; use --engine native")
    if not spec.startswith("cuda"):
        raise UsageError(f"--sd-draft-device {spec}: sd's draft runs in the target's process, so on CPU it shares the "
                         "target's cores; it takes a GPU (cuda:N)")
    return str(check_device(spec, flag="--sd-draft-device"))


def _variants(methods: tuple[Method, ...], engines: tuple[str, ...]) -> tuple[Variant, ...]:
    """Round-loop methods on every engine they run on, in run order; baselines once, on transformers."""
    loop = [Variant(m, e) for e in engines for m in methods if not m.is_baseline and e in m.engines]
    return tuple(loop + [Variant(m, TRANSFORMERS) for m in methods if m.is_baseline])


def placements(settings: RunSettings, *, own_process: bool) -> tuple[Placement, Placement]:
    """(target, draft). On CPU with a draft in its own process: one half of the cores each by default."""
    check_device(settings.device)
    default_target = default_draft = settings.device
    if torch.device(settings.device).type == "cpu" and own_process:
        default_target, default_draft = default_placements()
    elif torch.device(settings.device).type == "cuda":  # ssd's draft: the first GPU after the target's ranks
        spare = rank_device(settings.device, settings.tp)
        default_draft = spare if torch.cuda.device_count() > torch.device(spare).index else settings.device
    target = parse_placement(settings.target_device or default_target, flag="--target-device")
    draft = parse_placement(settings.draft_device or default_draft, flag="--draft-device")
    if own_process:
        check_disjoint(target, draft, given=(settings.target_device is not None, settings.draft_device is not None))
    return target, draft


def ssd_policy(settings: RunSettings, fit: AcceptanceFit | None = None) -> SsdPolicy:
    geometric = _geometric_branches(settings, fit) if needs_fit(settings) else None
    fan_out = build_fan_out(settings.fan_out, k=settings.k, fan_out_list=settings.fan_out_list,
                            miss_list=settings.fan_out_miss_list, geometric=geometric)
    return SsdPolicy(fan_out=fan_out, backup=settings.backup, saguaro_c=settings.saguaro_c,
                     round_timeout_s=settings.round_timeout_s)


def _geometric_branches(settings: RunSettings, fit: AcceptanceFit | None) -> tuple[tuple[int, ...], str]:
    """Branches per accepted count for a budget of 3 (K + 1), from the fit made before planning (fit.py)."""
    if fit is None:
        require_fit_from(settings)  # the one-line refusal without --fit-from
        raise ValueError("--fan-out geometric: fit (run/fit.py:fit_for) before planning")
    budget = 3 * (settings.k + 1)
    branches = tuple(geometric_fan_out(budget, fit.a, fit.r, settings.k))
    return branches, f"geometric a={fit.a:.3f} r={fit.r:.3f} budget={budget}"


def _check_tree_size(k: int, fan_out: FanOut) -> None:
    """ssd drafts (fan-out budget) x K tokens per row every round: bounded, so a typo cannot stall the draft."""
    tokens = fan_out.budget * k
    if tokens > MAX_TREE_TOKENS:
        largest = max(MAX_TREE_TOKENS // k, 1)
        raise UsageError(f"ssd fan-out budget {fan_out.budget} x --k {k} = {tokens} tree tokens per row per round, "
                         f"above the maximum of {MAX_TREE_TOKENS}; at --k {k} the largest budget is {largest} "
                         f"(e.g. --fan-out {max(largest // (k + 1), 1)})")
