"""Weight-only int8 linears for the self-draft: per-output-channel symmetric quantisation.

Every kernel reads the same int8 weights [out, in] and per-output scales (a quarter of fp32's
bytes). Which one a model gets is decided by trying them, as for dense kernels (kernels/probe.py):
- `int8_gemv`: CPU; kernels/gemv.c widens each int8 block to float32 in registers, float32
  activations and scales. Absent without a C compiler.
- `int8_dot`: CPU; kernels/dot_i8.c quantises the activations too (int8 per block of 32, one
  float32 scale each, as llama.cpp's Q8_0 path does) and sums each block's products in integers:
  fewer instructions per weight than widening them. Absent without a C compiler.
- `int8_tiles` (tiles.py): CPU with AMX; kernels/tiles_i8.c multiplies int8 blocks of up to 16
  rows on the tiles, the weights read once as int8 for all rows, the activations rounded per row to
  15 bits: the many-rows path (a tree step, a prefill) that the fused step also runs.
- `int8_vnni` (vnni.py): CPU with AVX2 at least; kernels/vnni_i8.c packs the int8 weights once
  with 16 outputs across a vector and multiplies 4 input bytes of a row into all of them per
  `vpdpbusd` (AVX-512 VNNI, AVX-VNNI; `vpmaddubsw` on AVX2), rows in register tiles sharing each weight
  load; the activations in int8_dot's blocks of 32: the many-rows path without AMX, fused too.
- `int8_bf16`, `int8_fbgemm`, `int8_onednn` (dynamic.py): the int8 values packed once more for a
  GEMM over all of a call's rows (oneDNN's bf16 GEMM; torch's quantized engines, activations in two
  8-bit digits): the path for a prefill's or a tree step's many rows, where a CPU has the units.
- `int8pack_mm`: `torch._weight_int8pack_mm`, bf16 activations and scales; missing or refused
  on some devices (CUDA builds may lack it).
- `int8_dequant`: dequantised to the activation dtype on every call, then a dense GEMM: slow for
  a decode step, but it may win a prefill's many rows; and the fallback where nothing else runs.
`select.py:select_int8_kernel` makes the choice; the manifest records it with its trials. Calls of few rows
go to a kernel the fused step (kernels/decode_layer.c) can run, where one works: fused, a one-row
step saves per-layer Python work that timing the linears alone does not see.
"""
