/*
 * libFuzzer harness for the parsers of configuration text: the numeric
 * TANDEM_* values, device selections, policy names, synthetic topology
 * sizes and machine descriptions (TANDEM_SIM). Each input is tried as
 * each of them; besides the sanitizers' checks, what a parser accepts
 * must lie within the ranges it documents.
 *
 *   build-fuzz/test/fuzz/fuzz-config -max_total_time=30 CORPUS_DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz-config: %s does not hold\n", #cond);              \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static void check_machine(const tdm_vt_machine *m) {
  CHECK(m->nclasses >= 1 && m->nclasses <= TDM_VT_MAX_CLASSES);
  for (unsigned c = 0; c < m->nclasses; c++) {
    const struct tdm_vt_class *k = &m->classes[c];
    CHECK(k->workers <= 4096);
    for (int i = 0; i < 8; i++)
      CHECK(k->speedup[i] == 0 ||
            (k->speedup[i] >= TDM_VT_MIN_SPEEDUP && k->speedup[i] <= TDM_VT_MAX_SPEEDUP));
    for (unsigned i = 0; i < k->nnamed; i++)
      CHECK(k->named[i].speedup == 0 || (k->named[i].speedup >= TDM_VT_MIN_SPEEDUP &&
                                         k->named[i].speedup <= TDM_VT_MAX_SPEEDUP));
    CHECK(k->slow_at >= 0 && k->slow_at <= TDM_VT_MAX_TIME);
    CHECK(k->slow_factor == 0 ||
          (k->slow_factor >= TDM_VT_MIN_SPEEDUP && k->slow_factor <= TDM_VT_MAX_SPEEDUP));
  }
  for (unsigned n = 1; n < m->nnodes; n++) {
    CHECK(m->latency[n] >= 0 && m->latency[n] <= TDM_VT_MAX_TIME);
    CHECK(m->bandwidth[n] >= TDM_VT_MIN_BANDWIDTH && m->bandwidth[n] <= TDM_VT_MAX_BANDWIDTH);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    return 0;
  memcpy(s, data, size);
  s[size] = 0;

  uint64_t v = 0;
  if (tdm__parse_count(s, 4096, &v))
    CHECK(v <= 4096);
  if (tdm__parse_bytes(s, TDM_MAX_MEMORY_LIMIT, &v))
    CHECK(v <= TDM_MAX_MEMORY_LIMIT);

  tdm_device_selection sel;
  memset(&sel, 0, sizeof sel);
  char bad[64] = "";
  /* the offending term, cut and ended, when it refuses (bad is written
   * only then) */
  if (tdm__parse_devices(s, &sel, bad, sizeof bad) != TDM_OK)
    CHECK(memchr(bad, 0, sizeof bad));

  tdm_policy p;
  tdm__policy_parse(s, &p);

  uint64_t leaves, objects;
  tdm__synthetic_size(s, &leaves, &objects);
  CHECK(leaves <= objects);

  static const char *const names[] = {"gemm", "small", "potrf", "trsm", "syrk"};
  tdm_vt_machine m;
  char err[256];
  if (tdm__vt_parse_machine(s, NULL, 0, &m, err, sizeof err) == TDM_OK)
    check_machine(&m);
  else
    CHECK(memchr(err, 0, sizeof err));
  if (tdm__vt_parse_machine(s, names, 5, &m, err, sizeof err) == TDM_OK)
    check_machine(&m);
  free(s);
  return 0;
}
