"""Share of decode time spent recording: the loop's per-round StepRecords plus the Recorder's
column appends, timed by wrapping exactly those functions during a real run."""
import time

import pandas as pd

import ssdbench.decoding.loop as loop
from ssdbench.decoding.recorder import Recorder
from ssdbench.run import execute, session
from ssdbench.run.plan import build_plan
from ssdbench.run.settings import RunSettings

spent = {"ns": 0}


def timed(fn):
    def wrapper(*args, **kwargs):
        t = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            spent["ns"] += time.perf_counter_ns() - t
    return wrapper


loop._records = timed(loop._records)
Recorder.add_steps = timed(Recorder.add_steps)
Recorder.add_request = timed(Recorder.add_request)

plan = build_plan(RunSettings(suite="humaneval", num_prompts=6, max_new_tokens=64, methods=("ar", "sd"), threads=2,
                              batch_size=1))
models, workload, _ = session.prepare(plan)
recorder = Recorder(run_id="overhead")
execute.run_all(plan, models, workload, recorder, lambda *a: None)
requests = pd.DataFrame(recorder.requests)
decode_ms = requests["decode_ms"].sum() + requests["ttft_ms"].sum()
print(f"rounds recorded: {len(recorder.steps['round'])}, requests: {len(requests)}")
print(f"recording: {spent['ns'] / 1e6:.2f} ms of {decode_ms:.0f} ms decode+prefill = {spent['ns'] / 1e6 / decode_ms:.4%}")
