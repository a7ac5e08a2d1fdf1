/* What decode_layer.c hands attention.c: the step's dimensions and the attention call. */
#ifndef SSDBENCH_DECODE_LAYER_H
#define SSDBENCH_DECODE_LAYER_H
#include <stdint.h>

typedef struct {
  int64_t rows;  /* N token rows in this step */
  int64_t batch; /* B sequences the cache holds */
  int64_t hidden, heads, kv_heads, head_dim, max_len;
  int64_t span; /* the mask's width (slots [0, span) considered); unused without a mask */
  float eps, scale;
  int32_t threads;
} layer_dims;

/* q [N, (H + 2 Hkv) D] (q heads first); out [N, H D]. Returns 0, or -1 without scratch memory. */
int ssdbench_attend_rows(const float *qkv, const float *k_cache, const float *v_cache, float *out, const int64_t *seq,
                         const int64_t *slots, const uint8_t *mask, const layer_dims *s);
#endif
