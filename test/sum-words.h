/* A reduction of 64-bit words by addition (TDM_REDUX), for the tests:
 * its init codelet sets a lane's words to 0, its combine codelet adds
 * one lane into another, word by word. */
#ifndef TDM_TEST_SUM_WORDS_H
#define TDM_TEST_SUM_WORDS_H

#include "common.h"

static inline void sum_words_zero(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  memset(b[0].ptr, 0, b[0].nx * b[0].elem_size);
}

static inline void sum_words_add(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  uint64_t *d = b[0].ptr;
  const uint64_t *s = b[1].ptr;
  for (size_t i = 0; i < b[0].nx; i++)
    d[i] += s[i];
}

/* The reduction, with `copies` lanes (0: one per worker). */
static inline tdm_reduction sum_words(unsigned copies) {
  static const tdm_codelet zero = {.name = "zero", .cpu_fn = sum_words_zero, .nbuffers = 1,
                                   .modes = {TDM_W}};
  static const tdm_codelet add = {.name = "add", .cpu_fn = sum_words_add, .nbuffers = 2,
                                  .modes = {TDM_RW, TDM_R}};
  return (tdm_reduction){.struct_size = sizeof(tdm_reduction), .init = &zero, .combine = &add,
                         .copies = copies};
}

#endif
