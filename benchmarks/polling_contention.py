"""Does the SSD verifier's or server's polling loop slow the other core? The target's forward on core 0 while core 1 polls a tensor or sleeps."""
import os, sys, time, statistics, subprocess, torch
os.sched_setaffinity(0, {0}); torch.set_num_threads(1)
from ssdbench.models.source import resolve_model
from ssdbench.models.weights import load_config, load_state_dict
from ssdbench.models.llama import build_native_model
src = resolve_model("smollm2-135m")
m = build_native_model(load_config(src), load_state_dict(src, dtype=torch.float32))
m.allocate(1, 512); m.forward(torch.randint(0, 1000, (1, 200)), torch.arange(200).unsqueeze(0))
def step_ms():
    ts = []
    for _ in range(20):
        t = time.perf_counter(); m.forward(torch.randint(0, 1000, (1, 1)), torch.tensor([[200]])); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
print("alone: %.1f ms" % step_ms())
p = subprocess.Popen([sys.executable, "-c", "import os, torch; os.sched_setaffinity(0,{1}); torch.set_num_threads(1)\nt=torch.zeros(8,dtype=torch.int64)\nwhile True: int(t[0])"])
time.sleep(2); print("other core polling a tensor: %.1f ms" % step_ms()); p.kill()
p = subprocess.Popen([sys.executable, "-c", "import os, time; os.sched_setaffinity(0,{1})\nwhile True: time.sleep(0.0001)"])
time.sleep(2); print("other core sleeping 0.1 ms: %.1f ms" % step_ms()); p.kill()
print("alone again: %.1f ms" % step_ms())
