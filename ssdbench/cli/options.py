"""Option aliases shared by the commands (defined once, so `run` and `sweep` agree)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

Target = Annotated[str, typer.Option("--target", help="Target model: local HF folder, .gguf file, repo id or alias (llama-3.1-70b, qwen3-0.6b, ...). Default: the embedded SmolLM2-135M-Instruct.")]
Draft = Annotated[str, typer.Option("--draft", help="Draft: a model spec like --target, 'self-int8' (int8 copy of the target) or 'ngram' (prompt lookup, no model).")]
Suite = Annotated[str, typer.Option("--suite", help="Prompt suite: smoke, humaneval, mtbench, gsm8k, alpaca, ultrafeedback, specbench, or a .jsonl path.")]
Methods = Annotated[str, typer.Option("--methods", help="Comma list of: ar, sd, ssd, hf-generate, hf-assisted.")]
Lookahead = Annotated[int, typer.Option("--k", help="Lookahead K: draft tokens proposed per round (at most 32).")]
Temperature = Annotated[float, typer.Option("--temperature", help="Target temperature; 0 = greedy.")]
DraftTemperature = Annotated[Optional[float], typer.Option("--draft-temperature", help="Draft sampling temperature (default: the target's). Exact either way.")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass (1 = off).")]
BatchSize = Annotated[int, typer.Option("--batch-size", help="Requests decoded together.")]
MaxNewTokens = Annotated[int, typer.Option("--max-new-tokens", help="New tokens per request at most.")]
TruncatePrompts = Annotated[str, typer.Option("--truncate-prompts", help="Prompts longer than the model's context leaves room for: 'none' refuses the run, 'left' keeps each prompt's last tokens (recorded in the manifest).")]
IgnoreEos = Annotated[bool, typer.Option("--ignore-eos", help="Always generate --max-new-tokens (fixed-length benchmarks): EOS is emitted as an ordinary token and decoding continues, for every method.")]
Order = Annotated[str, typer.Option("--order", help="interleaved: every method on a prompt (batch) before the next prompt, so load drift hits all alike; grouped: all of one method, then the next.")]
NumPrompts = Annotated[Optional[int], typer.Option("--num-prompts", help="Use the first N prompts of the suite (default 8; 0 = all).")]
Repeats = Annotated[int, typer.Option("--repeats", help="Run every prompt R times with distinct seeds.")]
Seed = Annotated[int, typer.Option("--seed", help="Base seed; each request's seed derives from it.")]
Device = Annotated[str, typer.Option("--device", help="Device for the models: cpu, cuda, cuda:1, ...")]
Dtype = Annotated[str, typer.Option("--dtype", help="float32, bfloat16 or float16.")]
Out = Annotated[Optional[Path], typer.Option("--out", help="Run directory (must not exist or be empty). Default: runs/<time>-<id>.")]
Engine = Annotated[str, typer.Option("--engine", help="Model code: native, hf, or both as 'native,hf' to compare them on the same prompts.")]
Attention = Annotated[str, typer.Option("--attention", help="Attention backend of the native engine: sdpa (reference) or flash.")]
LinearKernel = Annotated[str, typer.Option("--linear-kernel", help="Dense projection kernel of the native engine: auto (probe what runs and is fastest here, per row count), onednn or matmul.")]
Threads = Annotated[Optional[int], typer.Option("--threads", help="torch CPU threads (default: torch's choice).")]
Format = Annotated[str, typer.Option("--format", help="table or json.")]
DataDir = Annotated[Optional[Path], typer.Option("--data-dir", envvar="SSDBENCH_DATA_DIR", help="Folder holding file-backed suites (gsm8k/, spec_bench/, alpaca/, ultrafeedback/).")]
ChatTemplate = Annotated[bool, typer.Option("--chat-template/--no-chat-template", help="Wrap prompts in the tokenizer's chat template.")]
AllowDownload = Annotated[bool, typer.Option("--allow-download", help="Let a repo id or alias download from the hub when online.")]
TargetDevice = Annotated[Optional[str], typer.Option("--target-device", help="Where the target runs: cpu:CORES (pinned, e.g. cpu:0) or cuda:N. Default with ssd on CPU: half the cores.")]
DraftDevice = Annotated[Optional[str], typer.Option("--draft-device", help="Where ssd's draft process runs: cpu:CORES or cuda:N. Default with ssd on CPU: the other half of the cores.")]
FanOutOpt = Annotated[str, typer.Option("--fan-out", help="ssd branches per accepted count: an integer F (uniform), 'geometric' (needs --fit-from) or 'auto' (sized to fit inside one verify).")]
FanOutList = Annotated[Optional[str], typer.Option("--fan-out-list", help="ssd fan-out per accepted count 0..K, e.g. 6,3,2,1,1.")]
FanOutMissList = Annotated[Optional[str], typer.Option("--fan-out-miss-list", help="ssd fan-out for rows that missed last round (default: half the budget on k=0).")]
FitFrom = Annotated[Optional[Path], typer.Option("--fit-from", help="A previous run to fit acceptance (and the miss power law) from, for --fan-out geometric.")]
Backup = Annotated[str, typer.Option("--backup", help="ssd proposal on a cache miss: jit (draft now, verifier waits), fast (n-gram / random, no wait) or auto (per round, from measured costs).")]
SaguaroC = Annotated[float, typer.Option("--saguaro-c", help="Saguaro sampling: scale the draft's top-F tokens by C in (0, 1] when drafting (1 = off).")]
Timeline = Annotated[bool, typer.Option("--timeline/--no-timeline", help="With ssd: save timeline.png, a few rounds of verify, draft glue/tree/backup and waits.")]
RoundTimeout = Annotated[float, typer.Option("--round-timeout-s", help="ssd: fail the run when the draft process, still alive, has not answered a round within this many seconds (hung).")]
TrustRemoteCode = Annotated[bool, typer.Option("--trust-remote-code", help="Allow a model folder's own Python code (config.json auto_map) to run; off by default, recorded in the manifest.")]
