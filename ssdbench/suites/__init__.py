"""Prompt suites: built-in names (smoke, humaneval, mtbench, gsm8k, specbench, alpaca,
ultrafeedback) or a path to a JSONL file, loaded as a hashable `Suite` of `Prompt`s."""

from ssdbench.suites.chat import chat_messages, describe_template, render_prompt_ids
from ssdbench.suites.prompt import Prompt, Suite
from ssdbench.suites.registry import SuiteInfo, list_suites, load_suite

__all__ = [
    "Prompt",
    "Suite",
    "SuiteInfo",
    "describe_template",
    "list_suites",
    "load_suite",
    "render_prompt_ids",
    "chat_messages",
]
