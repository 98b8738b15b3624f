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
#include "sum-words.h" /* the reduction of TDM_REDUX buffers */

typedef struct {
  uint64_t id;
  unsigned nbuf;
  unsigned modes[MAX_WIDE];
} step;

static uint64_t mix(uint64_t x) {
  return test_mix64(x);
}

/* Reads every R/RW buffer first, then writes every W/RW buffer, then
 * adds to every TDM_COMMUTE or TDM_REDUX buffer (an addition: the order
 * of such tasks does not change the sum, a lost or doubled one does). */
static void apply(const step *s, uint64_t *const *bufs) {
  uint64_t acc = mix(s->id);
  for (unsigned i = 0; i < s->nbuf; i++)
    if (s->modes[i] == TDM_R || s->modes[i] == TDM_RW)
      for (int w = 0; w < WORDS; w++)
        acc = mix(acc ^ bufs[i][w]);
  for (unsigned i = 0; i < s->nbuf; i++)
    if (s->modes[i] == TDM_W || s->modes[i] == TDM_RW)
      for (int w = 0; w < WORDS; w++)
        bufs[i][w] = mix(acc + i * WORDS + (unsigned)w);
  for (unsigned i = 0; i < s->nbuf; i++)
    if (s->modes[i] == TDM_COMMUTE || s->modes[i] == TDM_REDUX)
      for (int w = 0; w < WORDS; w++)
        bufs[i][w] += mix(acc + i * WORDS + (unsigned)w);
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
/* The same with every mode: base-5 digits of all_modes' indices. */
static tdm_codelet xcls[4][625];
static const tdm_access all_modes[5] = {TDM_R, TDM_W, TDM_RW, TDM_COMMUTE, TDM_REDUX};
/* Wide tasks: one codelet per count; their modes are read at submission
 * (or recording) only, from wide_modes, which the submitting thread
 * fills. */
static tdm_codelet wide[MAX_WIDE + 1];
static tdm_access wide_modes[MAX_WIDE];

/* out[code]: nbuf buffers, whose modes are code's base-nmodes digits. */
static void codelets_of(tdm_codelet *out, unsigned nbuf, unsigned nmodes) {
  unsigned ncodes = 1;
  for (unsigned i = 0; i < nbuf; i++)
    ncodes *= nmodes;
  for (unsigned code = 0; code < ncodes; code++) {
    tdm_codelet *cl = &out[code];
    cl->name = "step";
    cl->cpu_fn = run_step;
    cl->nbuffers = nbuf;
    for (unsigned i = 0, c = code; i < nbuf; i++, c /= nmodes)
      cl->modes[nbuf - 1 - i] = all_modes[c % nmodes];
  }
}

static void init_codelets(void) {
  for (unsigned nbuf = 1; nbuf <= 4; nbuf++) {
    codelets_of(cls[nbuf - 1], nbuf, 3); /* all_modes' first three: R, W, RW */
    codelets_of(xcls[nbuf - 1], nbuf, 5);
  }
  for (unsigned n = TDM_MAX_BUFFERS + 1; n <= MAX_WIDE; n++)
    wide[n] = (tdm_codelet){.name = "wide", .cpu_fn = run_step, .nbuffers = n,
                            .dyn_modes = wide_modes};
}

#endif
