"""The serving engines ssdbench knows, one file each (`llama_cpp`, `vllm`, `sglang`, `trtllm`, and
`openai_compatible`, the fallback), each declaring an `Engine` (`base.py`); `registry.py` lists them.
A new engine is one file here and one line in the registry. `llama_cpp_build` builds llama-server."""
