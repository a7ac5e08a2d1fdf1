"""Memory-bandwidth utilisation of the target: how close decoding gets to the physical limit.

MBU = target weight bytes read per forward × target forwards per second ÷ measured read
bandwidth. Weights only (the KV cache adds little at these contexts). A round of ar/sd/ssd
is one target forward; transformers' plain generate (hf-generate, hf-static) is one forward per token; assisted
generate's forward count is not recorded, so it has none.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssdbench.metrics.summary import add_label


ONE_FORWARD_PER_TOKEN = ("hf-generate", "hf-static")  # plain generate: one target forward per decoded token


def target_mbu(requests: pd.DataFrame, *, weight_bytes: float | None, bandwidth_gbs: float | None) -> dict[str, float]:
    """label -> median per-request MBU (NaN where the forward count is unknown)."""
    if not weight_bytes or not bandwidth_gbs:
        return {}
    requests = add_label(requests)
    out = {}
    for label, group in requests.groupby("label", sort=False):
        method = group["method"].iloc[0]
        decode_s = group["decode_ms"].to_numpy(dtype=float) / 1e3
        # hf-assisted: forwards unknown; a serving engine (--endpoint): neither its forwards nor its weights are ours
        if method == "hf-assisted" or str(group["engine"].iloc[0]).startswith("endpoint-"):
            out[label] = float("nan")
            continue
        one_per_token = method in ONE_FORWARD_PER_TOKEN
        forwards = (group["new_tokens"] - 1 if one_per_token else group["rounds"]).to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            per_request = weight_bytes * forwards / decode_s / (bandwidth_gbs * 1e9)
        per_request = per_request[np.isfinite(per_request)]
        out[label] = float(np.median(per_request)) if per_request.size else float("nan")
    return out
