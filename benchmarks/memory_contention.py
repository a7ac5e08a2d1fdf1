"""The target's 1-token forward on core 0: alone, and while core 1 spins, polls a tensor (as SSD's mailbox
does), sleeps in 0.1 ms steps, streams memory, or multiplies in cache."""
import os, sys, time, statistics, subprocess, torch
os.sched_setaffinity(0, {0}); torch.set_num_threads(1)
from ssdbench.models.checkpoint.source import resolve_model
from ssdbench.models.checkpoint.weights import load_config, load_state_dict
from ssdbench.models.build import build_native_model
src = resolve_model("smollm2-135m")
m = build_native_model(load_config(src), load_state_dict(src, dtype=torch.float32))
m.allocate(1, 512); m.forward(torch.randint(0, 1000, (1, 200)), torch.arange(200).unsqueeze(0))
def step_ms():
    ts = []
    for _ in range(20):
        t = time.perf_counter(); m.forward(torch.randint(0, 1000, (1, 1)), torch.tensor([[200]])); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
print("alone: %.1f ms" % step_ms())
busy = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0,{1})\nwhile True: pass"])
time.sleep(1); print("other core spinning python: %.1f ms" % step_ms()); busy.kill()
poll = subprocess.Popen([sys.executable, "-c", "import os, torch; os.sched_setaffinity(0,{1})\nt=torch.zeros(8,dtype=torch.int64)\nwhile True: int(t[0])"])
time.sleep(2); print("other core polling a tensor: %.1f ms" % step_ms()); poll.kill()
nap = subprocess.Popen([sys.executable, "-c", "import os, time; os.sched_setaffinity(0,{1})\nwhile True: time.sleep(0.0001)"])
time.sleep(2); print("other core sleeping 0.1 ms: %.1f ms" % step_ms()); nap.kill()
mem = subprocess.Popen([sys.executable, "-c", "import os, torch; os.sched_setaffinity(0,{1}); torch.set_num_threads(1)\nx=torch.ones(64*2**20)\nwhile True: x.sum()"])
time.sleep(2); print("other core streaming memory: %.1f ms" % step_ms()); mem.kill()
mm = subprocess.Popen([sys.executable, "-c", "import os, torch; os.sched_setaffinity(0,{1}); torch.set_num_threads(1)\na=torch.randn(256,256)\nwhile True: a@a"])
time.sleep(2); print("other core cache-resident matmul: %.1f ms" % step_ms()); mm.kill()
