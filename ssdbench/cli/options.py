"""Option aliases shared by the commands (defined once, so `run` and `sweep` agree)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

Target = Annotated[str, typer.Option("--target", help="Target model: local HF folder, .gguf file, repo id or alias (llama-3.1-70b, qwen3-0.6b, ...). Default: the embedded SmolLM2-135M-Instruct.")]
Draft = Annotated[str, typer.Option("--draft", help="Draft: a model spec like --target, 'self-int8' (int8 copy of the target) or 'ngram' (prompt lookup, no model).")]
Suite = Annotated[str, typer.Option("--suite", help="Prompt suite: smoke, humaneval, mtbench, gsm8k, alpaca, ultrafeedback, specbench, or a .jsonl path.")]
Methods = Annotated[str, typer.Option("--methods", help="Comma list of: ar, sd, hf-generate, hf-assisted.")]
Lookahead = Annotated[int, typer.Option("--k", help="Lookahead K: draft tokens proposed per round.")]
Temperature = Annotated[float, typer.Option("--temperature", help="Target temperature; 0 = greedy.")]
DraftTemperature = Annotated[Optional[float], typer.Option("--draft-temperature", help="Draft sampling temperature (default: the target's). Exact either way.")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass (1 = off).")]
BatchSize = Annotated[int, typer.Option("--batch-size", help="Requests decoded together.")]
MaxNewTokens = Annotated[int, typer.Option("--max-new-tokens", help="New tokens per request at most.")]
IgnoreEos = Annotated[bool, typer.Option("--ignore-eos", help="Always generate --max-new-tokens (fixed-length benchmarks).")]
NumPrompts = Annotated[Optional[int], typer.Option("--num-prompts", help="Use the first N prompts of the suite (default 8; 0 = all).")]
Repeats = Annotated[int, typer.Option("--repeats", help="Run every prompt R times with distinct seeds.")]
Seed = Annotated[int, typer.Option("--seed", help="Base seed; each request's seed derives from it.")]
Device = Annotated[str, typer.Option("--device", help="Device for the models: cpu, cuda, cuda:1, ...")]
Dtype = Annotated[str, typer.Option("--dtype", help="float32, bfloat16 or float16.")]
Out = Annotated[Optional[Path], typer.Option("--out", help="Run directory (must not exist or be empty). Default: runs/<time>-<id>.")]
Engine = Annotated[str, typer.Option("--engine", help="Model code: native, hf, or both as 'native,hf' to compare them on the same prompts.")]
Attention = Annotated[str, typer.Option("--attention", help="Attention backend of the native engine: sdpa (reference) or flash.")]
Threads = Annotated[Optional[int], typer.Option("--threads", help="torch CPU threads (default: torch's choice).")]
Format = Annotated[str, typer.Option("--format", help="table or json.")]
DataDir = Annotated[Optional[Path], typer.Option("--data-dir", envvar="SSDBENCH_DATA_DIR", help="Folder holding file-backed suites (gsm8k/, spec_bench/, alpaca/, ultrafeedback/).")]
ChatTemplate = Annotated[bool, typer.Option("--chat-template/--no-chat-template", help="Wrap prompts in the tokenizer's chat template.")]
AllowDownload = Annotated[bool, typer.Option("--allow-download", help="Let a repo id or alias download from the hub when online.")]
