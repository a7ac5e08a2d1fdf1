"""Round trip of SSD's channel: the shared-memory mailbox (what ssdbench uses) against
torch.distributed gloo send/recv (docs/DESIGN.md §5.2's measured alternative), between two processes
pinned to one core each, for a small message and for 4 q-rows of SmolLM2's vocabulary."""
import os
import statistics
import time

import torch
import torch.multiprocessing as mp

from ssdbench.speculation import mailbox as mb

V, K, N = 49152, 4, 300


def mailbox_echo(box, with_q):
    os.sched_setaffinity(0, {1})
    seen = 0
    while True:
        box.wait_for(mb.REQ_SEQ, seen + 1, is_alive=lambda: True)
        seen += 1
        if int(box.ctrl[mb.REQ_KIND]) == mb.KIND_STOP:
            box.post_response(seen)
            return
        if with_q:
            box.q[:1].fill_(seen)  # the server writes its q-rows once, in place
        box.post_response(seen)


def gloo_echo(port, with_q):
    import torch.distributed as dist
    os.sched_setaffinity(0, {1})
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=1, world_size=2)
    msg = torch.zeros(8, dtype=torch.int64)
    q = torch.zeros(K, V)
    for _ in range(N):
        dist.recv(msg, 0)
        dist.send(q if with_q else msg, 0)
    dist.destroy_process_group()


def time_mailbox(with_q):
    box = mb.Mailbox.create(num_rows=1, max_prompt=4, k=K, vocab_size=V, with_q=True)
    p = mp.get_context("spawn").Process(target=mailbox_echo, args=(box, with_q))
    p.start()
    times = []
    for _ in range(N):
        t = time.perf_counter()
        seq = box.post_request(mb.KIND_ROUND)
        box.wait_for(mb.RESP_SEQ, seq, is_alive=p.is_alive)
        if with_q:
            float(box.q[0, 0, 0])  # the verifier reads the rows in place
        times.append((time.perf_counter() - t) * 1e3)
    box.post_request(mb.KIND_STOP)
    p.join()
    return statistics.median(times[20:])


def time_gloo(with_q):
    import torch.distributed as dist
    port = 29600 + with_q
    p = mp.get_context("spawn").Process(target=gloo_echo, args=(port, with_q))
    p.start()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2)
    msg = torch.zeros(8, dtype=torch.int64)
    reply = torch.zeros(K, V) if with_q else torch.zeros(8, dtype=torch.int64)
    times = []
    for _ in range(N):
        t = time.perf_counter()
        dist.send(msg, 1)
        dist.recv(reply, 1)
        times.append((time.perf_counter() - t) * 1e3)
    dist.destroy_process_group()
    p.join()
    return statistics.median(times[20:])


if __name__ == "__main__":
    os.sched_setaffinity(0, {0})
    torch.set_num_threads(1)
    for with_q in (False, True):
        what = f"{K} q-rows x {V} fp32" if with_q else "small message"
        print(f"{what:>24}: mailbox {time_mailbox(with_q):.3f} ms   gloo {time_gloo(with_q):.3f} ms  (median of {N - 20})")
