"""Where a model's weights come from: a local folder, the hub cache, a GGUF file converted once, the
embedded default, or random weights at a published shape; checked before anything loads.

- `model_source.py`: ModelSource, a model resolved to a local folder (defined once, here).
- `source.py`: resolving what the user typed (`--target`, `--draft`) to a ModelSource.
- `embedded.py`: the embedded SmolLM2 GGUF and its one-time conversion to safetensors.
- `weights.py`: config, tokenizer and state dicts from a source; weight-file checks and hashes.
- `safetensors_header.py`: reading safetensors headers without loading tensors.
- `aliases.py`: short names (llama-3.1-70b) for hub repo ids.
- `remote_code.py`: refusing a folder's own Python unless --trust-remote-code.
- `random_weights.py`: a published shape with random weights (--random-weights).
"""
