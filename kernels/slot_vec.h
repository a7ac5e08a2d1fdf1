/* One vector of floats as wide as a register of the vector unit the compiler targets (GCC's vector
 * extension), and e^x on it: for attention's softmax (attention.c) and the MLP's SiLU (decode_layer.c). */
#ifndef SSDBENCH_SLOT_VEC_H
#define SSDBENCH_SLOT_VEC_H
#include <stdint.h>
#include <string.h>

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

/* SLOT_BLOCK floats as one vector (GCC's vector extension). */
typedef float slot_vec __attribute__((vector_size(SLOT_BLOCK * sizeof(float))));
/* SLOT_BLOCK int32 lanes: exp's exponent bits and the comparisons' masks. */
typedef int32_t lane_bits __attribute__((vector_size(SLOT_BLOCK * sizeof(int32_t))));

/* value = e^value on each lane (through a pointer: a vector passed by value changes the ABI without
 * AVX-512): x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^6, times 2^n set
 * in the exponent bits (relative error within a few float epsilons of libm's expf: all softmax and SiLU
 * need). Below -87.3 (past float's normal range) it gives 0, above 88.37 (2^n past float's range)
 * infinity; NaN stays NaN. Written for the vector unit: glibc's expf is a call per value, and a 16-row
 * tree step spent ~8% of its time in it. */
static inline void vector_exp(slot_vec *value) {
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
#endif
