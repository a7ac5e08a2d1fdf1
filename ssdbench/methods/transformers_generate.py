"""What users already run: transformers' `generate`, plain and assisted, timed like our methods.

Every method's decode window starts when the first new token exists, right after the
target's prefill. Assisted `generate` fuses its prefill with the first verify round, so its
first chunk would carry several tokens at once; instead both baselines prefill first
(`generate` for one token, keeping its KV cache), note that instant, then continue from
the cache. EOS follows ar's semantics: with `ignore_eos` it is an ordinary token and
decoding runs to `max_new_tokens` (never `min_new_tokens`, which forbids EOS).

Assisted `generate` given the prefill's cache decodes wrongly (transformers 5.x: greedy
outputs leave the target's after ~20 tokens on SmolLM2, even with the target as its own
assistant), so the assisted continuation starts without it: the target re-reads the prompt
inside hf-assisted's decode window, which costs it one prefill there (stated in the manifest).

These run one request at a time; the run records batch size 1 for them.
"""

from __future__ import annotations

import time

import torch

from ssdbench.decoding.workload import DecodeSettings
from ssdbench.methods.base import GenerateResult
from ssdbench.models.hf_engine import cache_argument_name

# An id no vocabulary holds (transformers warns on negative ones): EOS then decodes as a normal token.
NEVER_EOS = 2**31 - 1


def hf_generate(
    model,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    eos_ids: frozenset[int],
    seed: int,
    assistant=None,
    prompt_lookup_tokens: int | None = None,
    k: int = 4,
    static_cache_len: int | None = None,
) -> GenerateResult:
    """transformers' generate on one prompt; `assistant` (a model) or prompt lookup makes it assisted.

    `eos_ids` empty means ignore EOS (ar's `--ignore-eos`): EOS is emitted and decoding continues.
    `static_cache_len`: plain generate with a StaticCache of that many slots, the same for every
    request so shapes repeat; on CUDA transformers then compiles the forward (its fastest path).
    """
    device = next(model.parameters()).device
    input_ids = torch.tensor([prompt_ids], dtype=torch.int64, device=device)  # [1, T]
    common = {**_sampling_kwargs(temperature, top_p), **_eos_kwargs(eos_ids)}
    torch.manual_seed(seed)  # transformers' sampling draws from the global generator
    start_ns = time.perf_counter_ns()
    with torch.inference_mode():
        static = {} if static_cache_len is None else {cache_argument_name(model): _static_cache(model, static_cache_len)}
        first = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=1,
                               return_dict_in_generate=True, **common, **static)
        first_token_ns = time.perf_counter_ns()
        sequences = first.sequences  # [1, T+1]
        if max_new_tokens > 1 and int(sequences[0, -1]) not in eos_ids:
            assisted = assistant is not None or prompt_lookup_tokens is not None
            rest = _assisted_kwargs(assistant, prompt_lookup_tokens, k)
            if not assisted:  # plain generate continues from its cache; assisted cannot (see module note)
                rest[cache_argument_name(model)] = _returned_cache(first)
            sequences = model.generate(sequences, attention_mask=torch.ones_like(sequences),
                                       max_new_tokens=max_new_tokens - 1, **common, **rest)
    end_ns = time.perf_counter_ns()
    return GenerateResult(sequences[0, len(prompt_ids):].tolist(), start_ns, first_token_ns, end_ns)


def _static_cache(model, max_cache_len: int):
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=max_cache_len)


def _returned_cache(output):
    """The KV cache generate returned (transformers 5.x names it `cache`, earlier `past_key_values`)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _assisted_kwargs(assistant, prompt_lookup_tokens: int | None, k: int) -> dict:
    kwargs = {}
    if assistant is not None:
        # a fixed K, as sd drafts: no dynamic schedule, no confidence cut-off
        assistant.generation_config.num_assistant_tokens = k
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        kwargs["assistant_model"] = assistant
    if prompt_lookup_tokens is not None:
        kwargs["prompt_lookup_num_tokens"] = prompt_lookup_tokens
    return kwargs


def _eos_kwargs(eos_ids: frozenset[int]) -> dict:
    """The run's own EOS ids (not the model's defaults); none at all when EOS is ignored."""
    eos = sorted(eos_ids) or [NEVER_EOS]
    return {"eos_token_id": eos, "pad_token_id": eos[0]}


def _sampling_kwargs(temperature: float, top_p: float) -> dict:
    if temperature == 0:
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}


class TransformersBaseline:
    """transformers' `generate` as a Baseline (methods/base.py): plain, or assisted by a draft model
    or prompt lookup, with the run's sampling and K."""

    def __init__(self, model, decode: DecodeSettings, *, assistant=None, prompt_lookup_tokens: int | None = None,
                 static_cache_len: int | None = None):
        self.model, self.decode = model, decode
        self.assistant, self.prompt_lookup_tokens = assistant, prompt_lookup_tokens
        self.static_cache_len = static_cache_len

    def generate(self, prompt_ids: list[int], *, seed: int, max_new_tokens: int,
                 eos_ids: frozenset[int]) -> GenerateResult:
        return hf_generate(self.model, prompt_ids, max_new_tokens=max_new_tokens,
                           temperature=self.decode.target.temperature, top_p=self.decode.target.top_p, eos_ids=eos_ids,
                           seed=seed, assistant=self.assistant, prompt_lookup_tokens=self.prompt_lookup_tokens,
                           k=self.decode.k, static_cache_len=self.static_cache_len)


def describe_common(decode: DecodeSettings, placement: dict) -> dict:
    """What the manifest says of every transformers baseline: placement, timing, EOS."""
    return {
        "batch_size": 1, "placement": placement,
        "decode_window": "from the first new token: a separate one-token generate() (the prefill), then "
                         "generate() continuing from its KV cache",
        "eos": f"ignored: eos_token_id=[{NEVER_EOS}] (no such token), EOS decodes as an ordinary token"
               if decode.ignore_eos else "the run's EOS ids stop a request, as for ar",
    }
