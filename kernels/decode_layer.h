/* What decode_layer.c hands attention.c: the step's dimensions and the attention call. */
#ifndef SSDBENCH_DECODE_LAYER_H
#define SSDBENCH_DECODE_LAYER_H
#include <stdint.h>

#include "slot_vec.h"

typedef struct {
  int64_t rows;  /* N token rows in this step */
  int64_t batch; /* B sequences the cache holds */
  int64_t hidden, heads, kv_heads, head_dim, max_len;
  int64_t span; /* the mask's width (slots [0, span) considered); unused without a mask */
  float eps, scale;
  int32_t threads;
} layer_dims;

/* Floats of one (sequence, KV head)'s keys in blocks of SLOT_BLOCK slots, each block transposed [D, SLOT_BLOCK]. */
static inline int64_t key_block_floats(const layer_dims *s) {
  return (s->max_len + SLOT_BLOCK - 1) / SLOT_BLOCK * SLOT_BLOCK * s->head_dim;
}

/* q [N, (H + 2 Hkv) D] (q heads first); out [N, H D]; k_cache, v_cache [B, Hkv, S_max, D]; key_blocks the keys
 * again as [B, Hkv, S_max / SLOT_BLOCK, D, SLOT_BLOCK], or NULL. Returns 0, or -1 without scratch memory. */
int ssdbench_attend_rows(const float *qkv, const float *k_cache, const float *key_blocks, const float *v_cache,
                         float *out, const int64_t *seq, const int64_t *slots, const uint8_t *mask,
                         const layer_dims *s);
#endif
