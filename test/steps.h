/*
 * Random tasks for the differential tests (test-random-dag, test-graph):
 * a task mixes what it reads into what it writes with a function of its
 * number, so that any reordering of conflicting tasks changes the
 * result. Define WORDS (the words of a handle) and MAX_WIDE (the most
 * buffers of a task) before including.
 */
#ifndef TDM_TEST_STEPS_H
#define TDM_TEST_STEPS_H

#include "common.h"

typedef struct {
  uint64_t id;
  unsigned nbuf;
  unsigned modes[MAX_WIDE];
} step;

static uint64_t mix(uint64_t x) {
  return test_mix64(x);
}

/* Reads every R/RW buffer first, then writes every W/RW buffer. */
static void apply(const step *s, uint64_t *const *bufs) {
  uint64_t acc = mix(s->id);
  for (unsigned i = 0; i < s->nbuf; i++)
    if (s->modes[i] & TDM_R)
      for (int w = 0; w < WORDS; w++)
        acc = mix(acc ^ bufs[i][w]);
  for (unsigned i = 0; i < s->nbuf; i++)
    if (s->modes[i] & TDM_W)
      for (int w = 0; w < WORDS; w++)
        bufs[i][w] = mix(acc + i * WORDS + (unsigned)w);
}

static void run_step(const tdm_buffer *b, const void *args, size_t n) {
  (void)n;
  const step *s = args;
  uint64_t *bufs[MAX_WIDE];
  for (unsigned i = 0; i < s->nbuf; i++)
    bufs[i] = b[i].ptr;
  apply(s, bufs);
}

/* A codelet for every (nbuf, modes) combination drawn; code is the modes
 * as base-3 digits, first buffer most significant. Filled before any task
 * runs: codelets are read by the workers. */
static tdm_codelet cls[4][81];
/* Wide tasks: one codelet per count; their modes are read at submission
 * (or recording) only, from wide_modes, which the submitting thread
 * fills. */
static tdm_codelet wide[MAX_WIDE + 1];
static tdm_access wide_modes[MAX_WIDE];

static void init_codelets(void) {
  static const tdm_access mode_of[3] = {TDM_R, TDM_W, TDM_RW};
  for (unsigned nbuf = 1; nbuf <= 4; nbuf++) {
    unsigned ncodes = 1;
    for (unsigned i = 0; i < nbuf; i++)
      ncodes *= 3;
    for (unsigned code = 0; code < ncodes; code++) {
      tdm_codelet *cl = &cls[nbuf - 1][code];
      cl->name = "step";
      cl->cpu_fn = run_step;
      cl->nbuffers = nbuf;
      for (unsigned i = 0, c = code; i < nbuf; i++, c /= 3)
        cl->modes[nbuf - 1 - i] = mode_of[c % 3];
    }
  }
  for (unsigned n = TDM_MAX_BUFFERS + 1; n <= MAX_WIDE; n++)
    wide[n] = (tdm_codelet){.name = "wide", .cpu_fn = run_step, .nbuffers = n,
                            .dyn_modes = wide_modes};
}

#endif
