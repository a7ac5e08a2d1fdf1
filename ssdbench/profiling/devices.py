"""Checking a device name against this machine before anything is loaded onto it."""

from __future__ import annotations

from ssdbench.errors import UsageError


def check_device(name: str, *, flag: str = "--device"):
    """torch.device for `name`, or a one-line UsageError if it cannot be used here."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UsageError(f"{flag} {name!r} is not a device name (cpu, cuda, cuda:1, ...)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"{flag} {name}: CUDA is not available here (torch {torch.__version__})")
        if (device.index or 0) >= torch.cuda.device_count():
            raise UsageError(f"{flag} {name}: only {torch.cuda.device_count()} CUDA device(s) here")
    elif device.type != "cpu":
        raise UsageError(f"{flag} {name}: ssdbench runs on cpu or cuda")
    return device


def make_current(name: str) -> None:
    """On CUDA, make `name` this process's current device: CUDA events, syncs, new streams and graph
    captures that name no device go to the current one, which is otherwise cuda:0. (Plain "cuda"
    is the current device already.)"""
    import torch

    device = torch.device(name)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)


def same_device(a, b) -> bool:
    """Whether two device names are one device: plain "cuda" is the current CUDA device."""
    import torch

    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.type != "cuda" or a.index == b.index:
        return True
    current = torch.cuda.current_device()
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)
