/* One decoder layer of a decode step, in one call: norms, projections (gemv.c), RoPE, the
 * KV-cache writes, attention over each token row's visible slots, and the MLP.
 *
 * A decode step on a CPU does little arithmetic per weight, and launching its ~20 small
 * tensor operations per layer from Python cost about as much as reading the weights (a
 * SmolLM2-135M int8 draft step: 12.0 ms, of which ~6 ms int8 projections; fused, 8.4 ms). Here
 * the layer runs as plain loops; the projections are gemv.c's, dot_i8.c's, tiles_i8.c's or vnni_i8.c's, so each weight is read
 * once per step for all token rows.
 *
 * A step holds N token rows: any number of tokens of any of the cache's B sequences (one token
 * per sequence, a K+1-token verify, ssd's glue chunk, a tree of branches). Every row's K/V is
 * written before any row attends, so rows of one sequence see each other as the Python path's
 * forward does. Row n attends over its sequence's slots [0, span) where mask[n, j] is set, or,
 * with no mask, over the causal chain [0, slots[n]]. float32 throughout; the projections'
 * weights float32 or int8.
 *
 * Threads: the projections split their outputs (gemv.c); the rest splits token rows (norms,
 * RoPE, SiLU) and (rows of one sequence, KV head) tasks (attention), when more than one thread is given.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemv.h"

#define MAX_HEAD_DIM 1024

/* A projection as the Python side hands it over: int8 when scales is not NULL. */
typedef struct {
  const void *w;        /* [out, in], float32 or int8 */
  const float *scales;  /* [out] (int8) or NULL (float32) */
  const float *bias;    /* [out] or NULL */
  int64_t in, out;
  int32_t int8_inputs;  /* int8 weights only: 0 widens the weights (gemv.c), 1 quantises the inputs per block
                           (dot_i8.c), 2 per row on AMX tiles (tiles_i8.c: w is its packed layout), 3 per
                           block against vnni_i8.c's packed layout; float32 weights: 0 gemv.c, 4
                           packed_f32.c's packed layout */
  const int32_t *wsum;  /* tiles_i8.c's sum of each output's weights [out], else NULL */
} projection;

typedef struct {
  int64_t rows;  /* N token rows in this step */
  int64_t batch; /* B sequences the cache holds */
  int64_t hidden, heads, kv_heads, head_dim, max_len;
  int64_t span; /* the mask's width (slots [0, span) considered); unused without a mask */
  float eps, scale;
  int32_t threads;
} layer_dims;

static int project(const projection *p, const float *x, float *y, int64_t rows, int32_t threads) {
  if (p->scales && p->int8_inputs == 3)
    return ssdbench_vnni_i8(x, (const uint8_t *)p->w, p->scales, p->bias, y, rows, p->in, p->out, threads);
  if (p->scales && p->int8_inputs == 2)
    return ssdbench_tiles_i8(x, (const int8_t *)p->w, p->wsum, p->scales, p->bias, y, rows, p->in, p->out, threads, 1);
  if (p->scales && p->int8_inputs)
    return ssdbench_dot_i8(x, (const int8_t *)p->w, p->scales, p->bias, y, rows, p->in, p->out, threads);
  if (!p->scales && p->int8_inputs == 4)
    ssdbench_packed_f32(x, (const float *)p->w, p->bias, y, rows, p->in, p->out, threads);
  else if (p->scales)
    ssdbench_gemv_i8(x, (const int8_t *)p->w, p->scales, p->bias, y, rows, p->in, p->out, threads);
  else
    ssdbench_gemv_f32(x, (const float *)p->w, p->bias, y, rows, p->in, p->out, threads);
  return 0;
}

/* y = x / sqrt(mean(x^2) + eps) * w over n values. */
static void rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  const float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
}

static void rms_norm_rows(const float *x, const float *w, float *y, int64_t rows, int64_t n, float eps,
                          int32_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && rows > 1)
  for (int64_t r = 0; r < rows; r++) rms_norm(x + r * n, w, y + r * n, n, eps);
}

/* RoPE with sign-folded sin (llama.py's tables): x[i] * cos[i] + x[(i + d/2) % d] * sin[i]. */
static void rope(float *x, const float *cos_t, const float *sin_t, int64_t d) {
  float tmp[MAX_HEAD_DIM];
  const int64_t half = d / 2;
  for (int64_t i = 0; i < d; i++) tmp[i] = x[i] * cos_t[i] + x[(i + half) % d] * sin_t[i];
  memcpy(x, tmp, (size_t)d * sizeof(float));
}

/* Key slots transposed at once: one vector of scores per query, as wide as one register of the
 * vector unit the compiler targets. Wider vectors are split by the compiler after it has decided
 * what lives in registers, so their accumulators spill to the stack: with 16 floats on AVX2 a
 * 16-row tree step ran no faster than with scalar loops. */
#if defined(__AVX512F__)
#define SLOT_BLOCK 16
#elif defined(__AVX__)
#define SLOT_BLOCK 8
#else
#define SLOT_BLOCK 4
#endif
#define QUERY_BLOCK 4  /* queries scored together: independent chains of multiply-adds */
#define ROW_CHUNK 8    /* rows of one sequence per task: the keys are read once for all their query heads */
/* Vectors of each value row mixed per pass over the slots (QUERY_BLOCK x this many accumulators, in
 * registers): a value row is read as one run rather than a vector at a time with a stride of the head
 * size, the cache's layout; each output is still summed over the slots in order, so its bits are as
 * before. */
#define MIX_VECTORS (SLOT_BLOCK == 16 ? 4 : 2)

/* SLOT_BLOCK floats as one vector (GCC's vector extension). */
typedef float slot_vec __attribute__((vector_size(SLOT_BLOCK * sizeof(float))));

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

/* SLOT_BLOCK int32 lanes: exp's exponent bits and the comparisons' masks. */
typedef int32_t lane_bits __attribute__((vector_size(SLOT_BLOCK * sizeof(int32_t))));

/* value = e^value on each lane (through a pointer: a vector passed by value changes the ABI without
 * AVX-512): x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^6, times 2^n set
 * in the exponent bits (relative error within a few float epsilons of libm's expf: all softmax and SiLU
 * need). Below -87.3 (past float's normal range) it gives 0, above 88.37 (2^n past float's range)
 * infinity; NaN stays NaN. Written for the vector unit: glibc's expf is a call per value, and a 16-row
 * tree step spent ~8% of its time in it. */
static void vector_exp(slot_vec *value) {
  slot_vec x = *value;
  const lane_bits underflow = x < -87.3f, overflow = x > 88.37f;
  lane_bits in_range;
  memcpy(&in_range, &x, sizeof in_range);
  in_range &= ~(underflow | overflow); /* those lanes computed from 0, then replaced below */
  memcpy(&x, &in_range, sizeof x);
  const slot_vec shift = (slot_vec){0} + 12582912.f; /* 1.5 * 2^23: adding it rounds to an integer */
  const slot_vec n = (x * 1.44269504f + shift) - shift;
  const slot_vec r = (x - n * 0.693145752f) - n * 1.42860677e-6f; /* ln 2 in two parts: r stays exact */
  slot_vec poly = (slot_vec){0} + (1.f / 720.f);
  poly = poly * r + (1.f / 120.f);
  poly = poly * r + (1.f / 24.f);
  poly = poly * r + (1.f / 6.f);
  poly = poly * r + .5f;
  poly = poly * r + 1.f;
  poly = poly * r + 1.f;
  const lane_bits exponent = (__builtin_convertvector(n, lane_bits) + 127) << 23;
  slot_vec two_n;
  memcpy(&two_n, &exponent, sizeof two_n);
  slot_vec y = poly * two_n;
  lane_bits bits;
  memcpy(&bits, &y, sizeof bits);
  const lane_bits inf_bits = (lane_bits){0} + 0x7f800000;
  bits = (bits & ~underflow & ~overflow) | (inf_bits & overflow);
  memcpy(value, &bits, sizeof *value);
}

/* y = silu(gate) * up over n values: gate / (1 + e^-gate) * up. */
static void silu_times(const float *gate, const float *up, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + SLOT_BLOCK <= n; i += SLOT_BLOCK) {
    slot_vec g, u;
    memcpy(&g, gate + i, sizeof g);
    memcpy(&u, up + i, sizeof u);
    slot_vec e = -g;
    vector_exp(&e);
    g = g / (1.f + e) * u;
    memcpy(y + i, &g, sizeof g);
  }
  for (; i < n; i++) y[i] = gate[i] / (1.f + expf(-gate[i])) * up[i];
}

/* Turns one query's scores [stride] (stride a multiple of SLOT_BLOCK) into its softmax weights over
 * the visible slots j <= last (visible NULL: all of them); every other slot gets weight 0. */
static void softmax_visible(float *scores, const uint8_t *visible, int64_t last, int64_t stride) {
  float top = -INFINITY;
  for (int64_t j = 0; j < stride; j++) {
    if (j > last || (visible && !visible[j])) scores[j] = -INFINITY;
    else if (scores[j] > top) top = scores[j];
  }
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
 * [S_max, D]. scores: room for count * group * (S_max + SLOT_BLOCK) floats; kt for D * SLOT_BLOCK. */
static void attend_group(const float *qkv, const float *k, const float *v, float *out, const int64_t *rows,
                         int64_t count, int64_t g, const int64_t *slots, const uint8_t *mask, const layer_dims *s,
                         float *scores, float *kt) {
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
    for (int64_t i = 0; i < d; i++)
      for (int64_t j = 0; j < SLOT_BLOCK; j++) kt[i * SLOT_BLOCK + j] = j < n ? k[(jb + j) * d + i] : 0.f;
    score_block(q, queries, kt, scores, stride, jb, n, d, s->scale);
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

/* q [N, (H + 2 Hkv) D] (q heads first); out [N, H D]. Tasks: (up to ROW_CHUNK rows of one sequence,
 * one KV head). Returns 0, or -1 without scratch memory. */
static int attend_rows(const float *qkv, const float *k_cache, const float *v_cache, float *out, const int64_t *seq,
                       const int64_t *slots, const uint8_t *mask, const layer_dims *s) {
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
      const int64_t at = (seq[order[first]] * hkv + g) * s->max_len * d;
      attend_group(qkv, k_cache + at, v_cache + at, out, order + first, count, g, slots, mask, s, scores, kt);
    }
    free(scores);
    free(kt);
  }
  free(order);
  free(chunks);
  return status;
}

/* x [N, hidden] (the residual stream, updated in place); cos, sin [N, D] at each row's position;
 * k_cache, v_cache: this layer's [B, Hkv, S_max, D]; seq [N]: each row's sequence (cache row);
 * slots [N]: where each row's K/V goes; mask [N, span] (uint8) or NULL for the causal chain.
 * q_norm, k_norm [D] or NULL. Returns 0; -1 when scratch memory could not be had; -2 when a
 * sequence, slot or span lies outside the cache (nothing is written then); -3 when a projection
 * on AMX tiles cannot run here. */
int ssdbench_decode_layer(float *x, const float *attn_norm, const float *mlp_norm, const projection *qkv,
                          const projection *o, const projection *gate_up, const projection *down,
                          const float *q_norm, const float *k_norm, const float *cos_t, const float *sin_t,
                          float *k_cache, float *v_cache, const int64_t *seq, const int64_t *slots,
                          const uint8_t *mask, const layer_dims *s) {
  const int64_t n_rows = s->rows, hid = s->hidden, d = s->head_dim, h = s->heads, hkv = s->kv_heads;
  const int64_t width = (h + 2 * hkv) * d, inter = gate_up->out / 2;
  const int32_t threads = s->threads;
  if (d > MAX_HEAD_DIM) return -1;
  if (mask && (s->span < 1 || s->span > s->max_len)) return -2;
  for (int64_t n = 0; n < n_rows; n++) /* the Python path raises on these: never write outside the cache */
    if (seq[n] < 0 || seq[n] >= s->batch || slots[n] < 0 || slots[n] >= s->max_len) return -2;
  float *normed = malloc((size_t)(n_rows * hid) * sizeof(float));
  float *proj = malloc((size_t)(n_rows * (width > 2 * inter ? width : 2 * inter)) * sizeof(float));
  float *attn = malloc((size_t)(n_rows * (h * d > inter ? h * d : inter)) * sizeof(float));
  float *delta = malloc((size_t)(n_rows * hid) * sizeof(float));
  int status = 0;
  if (!normed || !proj || !attn || !delta) {
    status = -1;
    goto done;
  }
  rms_norm_rows(x, attn_norm, normed, n_rows, hid, s->eps, threads);
  if ((status = project(qkv, normed, proj, n_rows, threads)) != 0) goto done; /* [N, (H + 2 Hkv) D] */
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && n_rows > 1)
  for (int64_t n = 0; n < n_rows; n++) {
    float *row = proj + n * width; /* q [H, D], k [Hkv, D], v [Hkv, D] */
    const float *c = cos_t + n * d, *sn = sin_t + n * d;
    for (int64_t head = 0; head < h + hkv; head++) {
      float *part = row + head * d;
      const float *norm = head < h ? q_norm : k_norm;
      if (norm) rms_norm(part, norm, part, d, s->eps);
      rope(part, c, sn, d);
    }
  }
  for (int64_t n = 0; n < n_rows; n++) /* every row's K/V before any row attends */
    for (int64_t g = 0; g < hkv; g++) {
      const int64_t at = ((seq[n] * hkv + g) * s->max_len + slots[n]) * d;
      memcpy(k_cache + at, proj + n * width + (h + g) * d, (size_t)d * sizeof(float));
      memcpy(v_cache + at, proj + n * width + (h + hkv + g) * d, (size_t)d * sizeof(float));
    }
  if (attend_rows(proj, k_cache, v_cache, attn, seq, slots, mask, s) != 0) {
    status = -1;
    goto done;
  }
  if ((status = project(o, attn, delta, n_rows, threads)) != 0) goto done; /* [N, hidden] */
  for (int64_t i = 0; i < n_rows * hid; i++) x[i] += delta[i];
  rms_norm_rows(x, mlp_norm, normed, n_rows, hid, s->eps, threads);
  if ((status = project(gate_up, normed, proj, n_rows, threads)) != 0) goto done; /* [N, 2 I]: gate, then up */
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && n_rows > 1)
  for (int64_t n = 0; n < n_rows; n++) {
    const float *gate = proj + n * 2 * inter; /* gate [I], then up [I] */
    silu_times(gate, gate + inter, attn + n * inter, inter);
  }
  if ((status = project(down, attn, delta, n_rows, threads)) != 0) goto done; /* [N, hidden] */
  for (int64_t i = 0; i < n_rows * hid; i++) x[i] += delta[i];
done:
  free(normed);
  free(proj);
  free(attn);
  free(delta);
  return status;
}
