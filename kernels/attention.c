/* Attention of a decode step's token rows over the KV cache (decode_layer.c calls it once per layer):
 * scores, softmax over each row's visible slots, and the values mixed, tasks of (rows of one sequence,
 * KV head) split over the threads. float32 throughout. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decode_layer.h"
#include "slot_vec.h"

#define QUERY_BLOCK 4  /* queries scored together: independent chains of multiply-adds */
#define ROW_CHUNK 8    /* rows of one sequence per task: the keys are read once for all their query heads */
/* Vectors of each value row mixed per pass over the slots (QUERY_BLOCK x this many accumulators, in
 * registers): a value row is read as one run rather than a vector at a time with a stride of the head
 * size, the cache's layout; each output is still summed over the slots in order, so its bits are as
 * before. */
#define MIX_VECTORS (SLOT_BLOCK == 16 ? 4 : 2)

/* scores [Q, stride] at slots [jb, jb + n) for queries q[0..Q) (pointers to [D] vectors); kt: the
 * block's keys transposed [D, SLOT_BLOCK], zero past n. Each key block is used for every query of the
 * task (a tree step's rows and a GQA group's heads share all keys), and each query's scores are
 * SLOT_BLOCK lanes of one vector, so nothing is summed across a vector. */
static void score_block(const float *const *q, int64_t queries, const float *kt, float *scores, int64_t stride,
                        int64_t jb, int64_t n, int64_t d, float scale) {
  for (int64_t q0 = 0; q0 < queries; q0 += QUERY_BLOCK) {
    const int64_t nq = queries - q0 < QUERY_BLOCK ? queries - q0 : QUERY_BLOCK;
    const float *qs[QUERY_BLOCK];
    for (int64_t t = 0; t < QUERY_BLOCK; t++) qs[t] = q[q0 + (t < nq ? t : 0)];
    slot_vec acc[QUERY_BLOCK];
    memset(acc, 0, sizeof acc);
    for (int64_t i = 0; i < d; i++) {
      slot_vec keys;
      memcpy(&keys, kt + i * SLOT_BLOCK, sizeof keys);
      for (int64_t t = 0; t < QUERY_BLOCK; t++) acc[t] += qs[t][i] * keys;
    }
    for (int64_t t = 0; t < nq; t++) {
      float lanes[SLOT_BLOCK];
      memcpy(lanes, &acc[t], sizeof lanes);
      for (int64_t j = 0; j < n; j++) scores[(q0 + t) * stride + jb + j] = lanes[j] * scale;
    }
  }
}


typedef uint8_t mask_bytes __attribute__((vector_size(SLOT_BLOCK))); /* a block of slots' mask entries */

/* Turns one query's scores [stride] (stride a multiple of SLOT_BLOCK) into its softmax weights over
 * the visible slots j <= last (visible NULL: all of them); every other slot gets weight 0. */
static void softmax_visible(float *scores, const uint8_t *visible, int64_t last, int64_t stride) {
  /* The hidden slots set to -inf and the maximum taken a vector at a time: one float at a time, each
   * comparison waited on the one before (a 16-branch tree step spent ~8% of its time in this loop). */
  const slot_vec hidden = (slot_vec){0} - INFINITY;
  lane_bits hidden_bits, top_bits;
  memcpy(&hidden_bits, &hidden, sizeof hidden_bits);
  slot_vec top_v = hidden;
  for (int64_t j = 0; j < stride; j += SLOT_BLOCK) {
    slot_vec e;
    lane_bits keep, e_bits;
    if (j + SLOT_BLOCK <= last + 1) { /* a whole block of slots the mask covers: its bytes as one vector */
      mask_bytes bytes = {0};
      if (visible) memcpy(&bytes, visible + j, sizeof bytes);
      keep = visible ? __builtin_convertvector(bytes, lane_bits) != 0 : (lane_bits){0} - 1; /* -1: kept */
    } else
      for (int64_t l = 0; l < SLOT_BLOCK; l++) keep[l] = j + l <= last && (!visible || visible[j + l]) ? -1 : 0;
    memcpy(&e_bits, scores + j, sizeof e_bits);
    e_bits = (e_bits & keep) | (hidden_bits & ~keep);
    memcpy(scores + j, &e_bits, sizeof e_bits);
    memcpy(&e, &e_bits, sizeof e);
    const lane_bits higher = e > top_v;
    memcpy(&top_bits, &top_v, sizeof top_bits);
    top_bits = (e_bits & higher) | (top_bits & ~higher);
    memcpy(&top_v, &top_bits, sizeof top_v);
  }
  float top = -INFINITY;
  for (int64_t l = 0; l < SLOT_BLOCK; l++) top = top_v[l] > top ? top_v[l] : top;
  slot_vec sum = {0};
  for (int64_t j = 0; j < stride; j += SLOT_BLOCK) {
    slot_vec e;
    memcpy(&e, scores + j, sizeof e);
    e -= top;
    vector_exp(&e);
    memcpy(scores + j, &e, sizeof e);
    sum += e;
  }
  float total = 0.f;
  for (int64_t i = 0; i < SLOT_BLOCK; i++) total += sum[i];
  for (int64_t j = 0; j < stride; j += SLOT_BLOCK) {
    slot_vec e;
    memcpy(&e, scores + j, sizeof e);
    e = e / total;
    memcpy(scores + j, &e, sizeof e);
  }
}

/* out_t [D] = sum_j p_t[j] v_j over slots j <= last for up to QUERY_BLOCK queries at once, so each value
 * row is loaded once for all of them. p: the queries' softmax weights (0 off their visible slots). */
static void mix_values(const float *const *p, float *const *out, int64_t queries, const float *v, int64_t last,
                       int64_t d) {
  int64_t i0 = 0;
  for (; i0 + MIX_VECTORS * SLOT_BLOCK <= d; i0 += MIX_VECTORS * SLOT_BLOCK) {
    slot_vec acc[QUERY_BLOCK][MIX_VECTORS];
    memset(acc, 0, sizeof acc);
    for (int64_t j = 0; j <= last; j++) /* each slot's values read as one run: a whole row for heads of 64 */
      for (int64_t c = 0; c < MIX_VECTORS; c++) {
        slot_vec values;
        memcpy(&values, v + j * d + i0 + c * SLOT_BLOCK, sizeof values);
        for (int64_t t = 0; t < QUERY_BLOCK; t++) acc[t][c] += p[t][j] * values;
      }
    for (int64_t t = 0; t < queries; t++) memcpy(out[t] + i0, acc[t], sizeof acc[t]);
  }
  for (; i0 + SLOT_BLOCK <= d; i0 += SLOT_BLOCK) {
    slot_vec acc[QUERY_BLOCK];
    memset(acc, 0, sizeof acc);
    for (int64_t j = 0; j <= last; j++) {
      slot_vec values;
      memcpy(&values, v + j * d + i0, sizeof values);
      for (int64_t t = 0; t < QUERY_BLOCK; t++) acc[t] += p[t][j] * values;
    }
    for (int64_t t = 0; t < queries; t++) memcpy(out[t] + i0, &acc[t], sizeof acc[t]);
  }
  for (; i0 < d; i0++) /* head sizes not a multiple of SLOT_BLOCK */
    for (int64_t t = 0; t < queries; t++) {
      float acc = 0.f;
      for (int64_t j = 0; j <= last; j++) acc += p[t][j] * v[j * d + i0];
      out[t][i0] = acc;
    }
}

/* The query heads of KV head g for `count` rows of one sequence (rows[]): k, v that head's cache
 * [S_max, D]; kb its keys in transposed blocks [S_max / SLOT_BLOCK, D, SLOT_BLOCK], or NULL: each block
 * is then transposed from k into kt. scores: room for count * group * (S_max + SLOT_BLOCK) floats; kt
 * for D * SLOT_BLOCK. */
static void attend_group(const float *qkv, const float *k, const float *kb, const float *v, float *out,
                         const int64_t *rows, int64_t count, int64_t g, const int64_t *slots, const uint8_t *mask,
                         const layer_dims *s, float *scores, float *kt) {
  const int64_t h = s->heads, group = s->heads / s->kv_heads, d = s->head_dim, width = (h + 2 * s->kv_heads) * d;
  const int64_t queries = count * group;
  const float *q[ROW_CHUNK * 64];
  int64_t last = 0; /* the last slot any of these rows sees */
  for (int64_t r = 0; r < count; r++) {
    const int64_t seen = mask ? s->span - 1 : slots[rows[r]];
    if (seen > last) last = seen;
    for (int64_t t = 0; t < group; t++) q[r * group + t] = qkv + rows[r] * width + (g * group + t) * d;
  }
  const int64_t stride = (last + SLOT_BLOCK) / SLOT_BLOCK * SLOT_BLOCK; /* whole vectors of slots */
  for (int64_t jb = 0; jb <= last; jb += SLOT_BLOCK) {
    const int64_t n = last + 1 - jb < SLOT_BLOCK ? last + 1 - jb : SLOT_BLOCK;
    /* A block's lanes past n (slots past the last seen) hold zeros or stale keys: scored, never kept. */
    const float *block = kb ? kb + jb * d : kt;
    if (!kb)
      for (int64_t i = 0; i < d; i++)
        for (int64_t j = 0; j < SLOT_BLOCK; j++) kt[i * SLOT_BLOCK + j] = j < n ? k[(jb + j) * d + i] : 0.f;
    score_block(q, queries, block, scores, stride, jb, n, d, s->scale);
  }
  for (int64_t r = 0; r < count; r++) {
    const int64_t row = rows[r];
    for (int64_t t = 0; t < group; t++)
      softmax_visible(scores + (r * group + t) * stride, mask ? mask + row * s->span : NULL,
                      mask ? s->span - 1 : slots[row], stride);
  }
  for (int64_t q0 = 0; q0 < queries; q0 += QUERY_BLOCK) {
    const int64_t nq = queries - q0 < QUERY_BLOCK ? queries - q0 : QUERY_BLOCK;
    const float *p[QUERY_BLOCK];
    float *o[QUERY_BLOCK];
    for (int64_t t = 0; t < QUERY_BLOCK; t++) {
      const int64_t query = q0 + (t < nq ? t : 0), r = query / group;
      p[t] = scores + query * stride;
      o[t] = out + rows[r] * h * d + (g * group + query % group) * d;
    }
    mix_values(p, o, nq, v, last, d);
  }
}

/* SLOT_BLOCK, for the cache's key blocks (models/kv_cache.py) to match this build. */
int ssdbench_slot_block(void) { return SLOT_BLOCK; }

/* q [N, (H + 2 Hkv) D] (q heads first); out [N, H D]. Tasks: (up to ROW_CHUNK rows of one sequence,
 * one KV head). Returns 0, or -1 without scratch memory. */
int ssdbench_attend_rows(const float *qkv, const float *k_cache, const float *key_blocks, const float *v_cache,
                         float *out, const int64_t *seq, const int64_t *slots, const uint8_t *mask,
                         const layer_dims *s) {
  const int64_t n_rows = s->rows, hkv = s->kv_heads, group = s->heads / s->kv_heads, d = s->head_dim;
  if (group > 64) return -1;
  int64_t *order = malloc((size_t)n_rows * sizeof(int64_t)); /* rows grouped by sequence, in step order */
  int64_t *chunks = malloc((size_t)(n_rows + 1) * sizeof(int64_t)); /* each chunk's first index into order */
  if (!order || !chunks) {
    free(order);
    free(chunks);
    return -1;
  }
  int64_t placed = 0, n_chunks = 0;
  for (int64_t b = 0; b < s->batch; b++)
    for (int64_t n = 0, in_chunk = 0; n < n_rows; n++) {
      if (seq[n] != b) continue;
      if (in_chunk == 0) chunks[n_chunks++] = placed;
      order[placed++] = n;
      in_chunk = (in_chunk + 1) % ROW_CHUNK;
    }
  chunks[n_chunks] = placed;
  const int64_t tasks = n_chunks * hkv;
  int status = 0;
  const int threads = s->threads > 1 && tasks > 1 ? s->threads : 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *scores = malloc((size_t)(ROW_CHUNK * group * (s->max_len + SLOT_BLOCK)) * sizeof(float));
    float *kt = malloc((size_t)(d * SLOT_BLOCK) * sizeof(float));
    if (!scores || !kt) {
#pragma omp atomic write
      status = -1;
    }
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; task++) {
      if (!scores || !kt) continue;
      const int64_t c = task / hkv, g = task % hkv, first = chunks[c], count = chunks[c + 1] - first;
      const int64_t head = seq[order[first]] * hkv + g, at = head * s->max_len * d;
      const float *kb = key_blocks ? key_blocks + head * key_block_floats(s) : NULL;
      attend_group(qkv, k_cache + at, kb, v_cache + at, out, order + first, count, g, slots, mask, s, scores, kt);
    }
    free(scores);
    free(kt);
  }
  free(order);
  free(chunks);
  return status;
}

