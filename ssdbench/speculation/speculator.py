"""The draft side of SSD: answer each round from the speculation cache, then prepare the next.

Runs in the draft's own process (server.py) but knows nothing of processes: `answer` turns
last round's outcomes into this round's proposals; `build` does the glue pass, the fork
and the tree, checking `should_stop` between steps so a request is never kept waiting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ssdbench.sampling.params import RowSampling
from ssdbench.decoding.draft_chain import draft_chain
from ssdbench.speculation.backups import fast_proposal
from ssdbench.speculation.cache import CachedProposal, SpeculationCache
from ssdbench.speculation.costs import CostModel
from ssdbench.speculation.drafting import draw, repeat_rows
from ssdbench.speculation.fan_out import FanOut
from ssdbench.speculation.forking import fork_branches
from ssdbench.speculation.glue import GluePlan, full_plan, reuse_plan, run_glue
from ssdbench.speculation.mode import ModeChooser
from ssdbench.speculation.tree import layout_tree


@dataclass
class DraftRow:
    history: list[int]  # committed tokens; after an outcome, ends with the pending token
    returned: list[int] = field(default_factory=list)  # the proposal last sent for this row
    active: bool = True
    missed: bool = True  # every new sequence misses its first round
    kind: str = "jit"  # how the last proposal was made: hit / jit / fast
    main_tokens: list[int] = field(default_factory=list)  # exactly the tokens whose K/V the main line holds

    @property
    def pending_position(self) -> int:
        return len(self.history) - 1

    @property
    def main_valid(self) -> int:
        """Leading history tokens the main line holds (the rest must be fed before drafting on)."""
        n = 0
        for a, b in zip(self.main_tokens, self.history):
            if a != b:
                break
            n += 1
        return n


@dataclass
class Answer:
    tokens: torch.Tensor  # [B, K] int64, on the host (both sides read them there)
    depth: list[int]
    q: torch.Tensor | None  # [B, K, V] on the draft's device: q-rows go device to device, never via the host
    hit: list[bool]
    backup: list[str | None]
    fan_out: list[int]  # branches the tree held for the row when the outcome arrived
    backup_ms: float


@dataclass
class BuildStats:
    glue_ms: float = 0.0
    tree_ms: float = 0.0
    depth: int = 0
    width: int = 0
    interrupted: bool = False


class Speculator:
    def __init__(self, draft, *, k: int, fan_out: FanOut, backup: str, saguaro_c: float = 1.0,
                 generator: torch.Generator | None = None, on_event=None) -> None:
        self.draft, self.k, self.fan_out, self.backup = draft, k, fan_out, backup
        self.saguaro_c = saguaro_c
        self.generator = generator or torch.Generator(device=draft.device).manual_seed(0)
        self.costs = CostModel()
        self.rows: list[DraftRow] = []
        self._accepted = self._trials = 0
        self._prefill_logits: torch.Tensor | None = None
        self._plans: list[GluePlan | None] = []
        self._tree_logits: list[torch.Tensor] = []
        self.chooser = ModeChooser() if fan_out.auto else None  # tree while verifying, or sync (see mode.py)
        self.on_event = on_event or (lambda kind, start_ns, end_ns: None)  # the draft's timeline
        self.on_fork = None  # (branches per row) -> None: told the fork before the tree grows (synthetic hits only)

    # ---- a new batch -------------------------------------------------------------------
    def start_batch(self, prompts: list[list[int]], sampling: RowSampling, *, max_len: int) -> None:
        """Prefill the prompts (while the target does the same), ready to fork on the first token."""
        start_ns = time.time_ns()
        self.rows = [DraftRow(history=list(p), main_tokens=list(p)) for p in prompts]
        self.sampling = sampling.to(self.draft.device)
        self.need_q = not sampling.all_greedy
        self.tree_base = max_len + self.k + 2
        self.max_len = self.tree_base + self.fan_out.budget * self.k + 1
        self.scratch_slot = self.max_len - 1  # where rows idle in a top-up step write (seen by nothing else)
        self.draft.allocate(len(prompts), self.max_len)
        self.cache = SpeculationCache(len(prompts))
        self.widths = [0] * len(prompts)
        width = max(len(p) for p in prompts)
        tokens = torch.tensor([p + [0] * (width - len(p)) for p in prompts])  # [B, L]
        positions = torch.arange(width).expand(len(prompts), width)  # [B, L]
        last = torch.tensor([[len(p) - 1] for p in prompts])  # [B, 1]
        self._prefill_logits = self.draft.forward(tokens.to(self.draft.device), positions.to(self.draft.device),
                                               logits_at=last.to(self.draft.device))  # [B, 1, V]
        self.on_event("prefill", start_ns, time.time_ns())

    # ---- answering a round -------------------------------------------------------------
    def answer(self, outcomes: list[tuple[bool, int, int]], *, period_ms: float | None = None) -> Answer:
        """outcomes[b] = (active, accepted count k, bonus token t) of the previous round.

        period_ms: time since the previous request (the server measures it), for `auto`'s mode choice.
        """
        if self.chooser is not None and period_ms is not None:
            tokens = sum(k + 1 for (active, k, _), row in zip(outcomes, self.rows) if active and row.returned)
            self.chooser.note(tokens, period_ms)

        tokens = torch.zeros(len(self.rows), self.k, dtype=torch.int64)  # [B, K]
        q = torch.zeros(len(self.rows), self.k, self.draft.vocab_size,
                        device=self.draft.device) if self.need_q else None  # [B, K, V]
        depth, hit, backup = [0] * len(self.rows), [False] * len(self.rows), [None] * len(self.rows)
        missing, hits = [], {}
        self._plans = [None] * len(self.rows)
        for b, (active, k, t) in enumerate(outcomes):
            self._commit(b, active, k, t)
            if not active:
                continue
            found = self.cache.lookup(b, k, t)
            if found is None:
                missing.append(b)
                continue
            hits[b] = found
        topped = self._top_up(hits)
        for b, (found, extra_logits) in topped.items():
            self._place(b, found.tokens, found.q, tokens, q, depth)
            hit[b] = True
            self._plans[b] = self._hit_plan(b, found, extra_logits)
        start, start_ns = time.perf_counter(), time.time_ns()
        kind = self._choose_backup(len(missing), outcomes)
        if missing:
            proposals = self._jit(missing) if kind == "jit" else self._fast(missing)
            for b, (row_tokens, row_q, known) in zip(missing, proposals):
                self._place(b, row_tokens, row_q, tokens, q, depth)
                backup[b] = kind
                row = self.rows[b]
                self._plans[b] = full_plan(row.history, row_tokens, row.main_valid) if known is None else reuse_plan(
                    row.history, row_tokens, known, tree_slots=None)
        backup_ms = (time.perf_counter() - start) * 1e3
        if missing:
            self.on_event("backup", start_ns, time.time_ns())
        if kind == "jit" and missing:
            self.costs.note_jit(backup_ms)
        for b, row in enumerate(self.rows):
            row.returned = tokens[b, : depth[b]].tolist()
            row.missed, row.kind = not hit[b], ("hit" if hit[b] else backup[b] or row.kind)
        return Answer(tokens, depth, q, hit, backup, list(self.widths), backup_ms)

    def _commit(self, b: int, active: bool, k: int, t: int) -> None:
        row = self.rows[b]
        row.active = active
        if not active:
            return
        if row.returned:
            self._accepted += k
            self._trials += min(k + 1, len(row.returned))
            self.costs.note_tokens(row.kind, k + 1)
        row.history.extend(row.returned[:k] + [t])

    def _place(self, b, row_tokens, row_q, tokens, q, depth) -> None:
        d = len(row_tokens)
        tokens[b, :d] = torch.tensor(row_tokens, dtype=torch.int64)
        depth[b] = d
        if q is not None:
            if row_q is None:  # a point mass: the proposal was not sampled
                q[b, torch.arange(d, device=q.device), tokens[b, :d].to(q.device)] = 1.0
            else:
                q[b, :d] = row_q  # device to device

    def _choose_backup(self, num_missing: int, outcomes) -> str:
        if self.backup != "auto" or num_missing == 0:
            return self.backup if self.backup != "auto" else "jit"
        others = self.costs.tokens_by_kind.get("hit", 2.0) * (sum(1 for o in outcomes if o[0]) - num_missing)
        return "jit" if self.costs.prefer_jit(num_missing, others) else "fast"

    def _hit_plan(self, b: int, found: CachedProposal, extra_logits: list[torch.Tensor]) -> GluePlan:
        """Reuse the branch's K/V (tree slots) and its step distributions for this row's glue.
        extra_logits: the distributions of the steps `_top_up` added after the tree's, [V] each."""
        d, n = found.depth, found.branch
        grown = d - len(extra_logits)
        known = torch.stack([self._tree_logits[j][b, n] for j in range(grown)] + extra_logits)  # [d, V]
        slots = [self.tree_base + n * self.k + j for j in range(d)]
        return reuse_plan(self.rows[b].history, found.tokens, known, tree_slots=slots)

    def _top_up(self, hits: dict[int, CachedProposal]) -> dict[int, tuple[CachedProposal, list[torch.Tensor]]]:
        """Hits whose branch the tree left shallower than K (it was cut short when the request came) grow
        to K tokens before the answer: each further step continues the branch in its own tree slots, as
        the tree would have, one row per hit in one forward. A hit then proposes the full K, for a few
        one-row steps: fewer than a miss's backup costs. Per row: (the proposal, the added steps' logits)."""
        short = {b: found for b, found in hits.items() if found.depth < self.k}
        out = {b: (found, []) for b, found in hits.items()}
        if not short:
            return out
        start_ns = time.time_ns()
        layout, dev, rows = self._layout, self.draft.device, len(self.rows)
        tokens = {b: list(found.tokens) for b, found in short.items()}
        qs = {b: [] for b in short}
        for step in range(min(found.depth for found in short.values()), self.k):
            growing = [b for b in short if len(tokens[b]) == step]  # rows whose branch reached this step
            current = torch.zeros(rows, 1, dtype=torch.int64)  # [B, 1]
            positions = torch.zeros(rows, 1, dtype=torch.int64)  # [B, 1]
            slots = torch.full((rows, 1), self.scratch_slot, dtype=torch.int64)  # [B, 1]: idle rows write here
            mask = torch.zeros(rows, 1, self.max_len, dtype=torch.bool)  # [B, 1, S]
            mask[:, 0, self.scratch_slot] = True
            for b in growing:
                n = short[b].branch
                current[b, 0] = tokens[b][-1]
                positions[b, 0] = layout.positions[b, n] + step
                slots[b, 0] = layout.slots(step)[b, n]
                mask[b, 0] = layout.mask(step, self.max_len)[b, n]
            logits = self.draft.forward(current.to(dev), positions.to(dev), slots=slots.to(dev),
                                        attn_mask=mask.to(dev))[:, 0]  # [B, V]
            fan = torch.full((rows,), self.fan_out.after_hit[step])  # [B]: as the tree would have drawn
            x, qx = draw(logits, self.sampling, fan, saguaro_c=self.saguaro_c, generator=self.generator,
                         need_q=self.need_q)
            drawn = x.cpu()
            for b in growing:
                tokens[b].append(int(drawn[b]))
                out[b][1].append(logits[b])
                if qx is not None:
                    qs[b].append(qx[b])
        for b, found in short.items():
            q = None if found.q is None else torch.cat([found.q, torch.stack(qs[b])])  # [K, V]
            out[b] = (CachedProposal(tokens[b], q, found.branch), out[b][1])
        self.on_event("top_up", start_ns, time.time_ns())
        return out

    def _fast(self, missing: list[int]) -> list[tuple[list[int], None, None]]:
        vocab = self.draft.vocab_size
        return [(fast_proposal(self.rows[b].history, k=self.k, vocab_size=vocab, generator=self.generator), None, None)
                for b in missing]

    def _jit(self, missing: list[int]) -> list[tuple[list[int], torch.Tensor | None, torch.Tensor]]:
        """Draft K tokens on the main line, as SD does: first feed what the main line lacks (ending
        with the pending token), then one token per step. Every row steps; only the missing rows'
        proposals are kept, and every row's main line records what was written."""
        dev = self.draft.device
        chunks = [row.history[row.main_valid :] if row.active else [row.history[-1]] for row in self.rows]
        starts = [len(row.history) - len(chunk) for row, chunk in zip(self.rows, chunks)]
        next_position = torch.tensor([row.pending_position + 1 for row in self.rows], device=dev)  # [B]
        fan = torch.tensor([self.fan_out.after_miss[j] for j in range(self.k)])  # [K]

        def saguaro_draw(step: int, logits: torch.Tensor):
            return draw(logits, self.sampling, fan[step].expand(len(self.rows)), saguaro_c=self.saguaro_c,
                        generator=self.generator, need_q=self.need_q)

        chain = draft_chain(self.draft, chunks, starts, next_position=next_position, steps=self.k, draw=saguaro_draw,
                            keep_logits=True)
        out_q = chain.q
        tokens = chain.tokens.tolist()  # [B, K]
        for row, drafted in zip(self.rows, tokens):
            row.main_tokens = row.history + drafted[: self.k - 1]
        qs = torch.stack(out_q, dim=1) if self.need_q else None  # [B, K, V]
        known = chain.logits  # [B, K, V]: D_0..D_{K-1}, reused by the glue pass
        return [(tokens[b], None if qs is None else qs[b], known[b]) for b in missing]

    # ---- preparing the next round ------------------------------------------------------
    def build(self, should_stop=lambda: False) -> BuildStats:
        """Glue, fork, and tree; returns early (a shallower tree) as soon as should_stop() is true."""
        stats = BuildStats()
        if self.chooser is not None and self.chooser.mode == "sync":
            self.cache.reset()  # every row misses; jit feeds what the main line lacks, on the next request
            self.widths, self._prefill_logits = [0] * len(self.rows), None
            self._tell_fork([[] for _ in self.rows])
            return stats
        start, start_ns = time.perf_counter(), time.time_ns()
        glue = self._glue()  # per row: logits [d+1, V]
        stats.glue_ms = (time.perf_counter() - start) * 1e3
        self.on_event("glue", start_ns, time.time_ns())
        self.costs.note_glue(stats.glue_ms)
        self.cache.reset()
        cap = self.fan_out.budget
        if self.fan_out.auto:
            cap = self.costs.branches_that_fit(self.k, cap)
        branches = fork_branches(self.rows, glue, self.fan_out, self.sampling, self._acceptance(), cap=cap)
        self.widths = [len(b) for b in branches]
        self._tell_fork(branches)
        if any(branches) and not should_stop():
            self._grow_tree(branches, stats, should_stop)
        stats.tree_ms = (time.perf_counter() - start) * 1e3 - stats.glue_ms
        return stats

    def _tell_fork(self, branches) -> None:
        if self.on_fork is not None:
            self.on_fork(branches)

    def _acceptance(self) -> float:
        return 0.6 if self._trials < 8 else min(max(self._accepted / self._trials, 0.05), 0.99)

    def _glue(self) -> list[torch.Tensor | None]:
        """Main-line K/V for [t, returned...] and the fork distributions, per active row (glue.py)."""
        if self._prefill_logits is not None:  # right after prefill: the prompt was the glue
            logits, self._prefill_logits = self._prefill_logits, None
            return [logits[b] if row.active else None for b, row in enumerate(self.rows)]
        plans = [plan if row.active else None for plan, row in zip(self._plans, self.rows)]
        glued = run_glue(self.draft, plans, [row.pending_position for row in self.rows])
        for row, plan in zip(self.rows, plans):
            if plan is not None:
                row.main_tokens = row.history + row.returned
            else:  # an inactive row's padding token landed on its pending slot
                row.main_tokens = row.main_tokens[: row.pending_position]
        return glued

    def _grow_tree(self, branches, stats: BuildStats, should_stop) -> None:
        dev = self.draft.device
        layout = layout_tree(branches, [row.pending_position for row in self.rows], tree_base=self.tree_base, depth=self.k)
        num_rows, width = layout.positions.shape
        self._layout = layout  # a hit cut short grows on from here (_top_up)
        stats.width = width
        current = torch.zeros(num_rows, width, dtype=torch.int64)  # [B, N]
        for b, row in enumerate(branches):
            current[b, : len(row)] = torch.tensor([br.bonus for br in row])
        sampling = repeat_rows(self.sampling, width)
        tokens = torch.zeros(num_rows, width, self.k, dtype=torch.int64)  # [B, N, K] on the host: read there
        q = torch.zeros(num_rows, width, self.k, self.draft.vocab_size,
                        device=dev) if self.need_q else None  # [B, N, K, V] stays on the draft's device
        current = current.to(dev)
        self._tree_logits = []  # per step: [B, N, V], reused by the next glue after a hit
        for step in range(self.k):
            t0, t0_ns = time.perf_counter(), time.time_ns()
            logits = self.draft.forward(current, (layout.positions + step).to(dev), slots=layout.slots(step).to(dev),
                                        attn_mask=layout.mask(step, self.max_len).to(dev))  # [B, N, V]
            self._tree_logits.append(logits)
            fan = torch.full((num_rows * width,), self.fan_out.after_hit[step])  # [B*N]
            x, qx = draw(logits.flatten(0, 1), sampling, fan, saguaro_c=self.saguaro_c, generator=self.generator,
                         need_q=self.need_q)
            tokens[:, :, step] = x.view(num_rows, width).cpu()  # waits for the step: its cost is timed below
            if q is not None:
                q[:, :, step] = qx.view(num_rows, width, -1)
            current = x.view(num_rows, width)
            stats.depth = step + 1
            self.costs.note_tree_step(width, (time.perf_counter() - t0) * 1e3)
            self.on_event("tree", t0_ns, time.time_ns())
            if step + 1 < self.k and should_stop():
                stats.interrupted = True
                break
        self._store(branches, tokens, q, stats.depth)

    def _store(self, branches, tokens, q, depth: int) -> None:
        for b, row in enumerate(branches):
            for n, br in enumerate(row):
                row_q = None if q is None else q[b, n, :depth]
                self.cache.store(b, br.accepted, br.bonus, CachedProposal(tokens[b, n, :depth].tolist(), row_q, n))
