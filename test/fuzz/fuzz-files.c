/*
 * libFuzzer harness for the parsers of the files Tandem reads back: the
 * performance model file and the OpenCL program cache entry. The first
 * byte chooses the parser, the rest is the file. Besides the sanitizers'
 * checks: a model that parses never predicts NaN, and an
 * entry that parses holds exactly its binary.
 *
 *   build-fuzz/test/fuzz/fuzz-files -max_total_time=30 CORPUS_DIR
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sched/perfmodel.h"
#ifdef TDM_HAVE_OPENCL
#include "../../backends/opencl/cl.h"
#endif

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz-files: %s does not hold\n", #cond);               \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* The key the seed entries were written for. */
static const char key[] = "fuzz key";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  const uint8_t *file = data + 1;
  size_t n = size - 1;
  if (data[0] % 2 == 0) {
    FILE *f = fmemopen((void *)file, n, "r");
    tdm_perfmodel *m = tdm__model_new();
    if (f && m && !tdm__model_parse(m, f)) {
      bool cal;
      double t = tdm__model_predict(m, "gemm", 4096, "cpu", &cal);
      CHECK(!isnan(t));
    }
    tdm__model_free(m);
    if (f)
      fclose(f);
  } else {
#ifdef TDM_HAVE_OPENCL
    size_t at = 0, len = 0;
    if (!tdm__cache_parse(file, n, key, sizeof key - 1, &at, &len))
      CHECK(len > 0 && at + len == n);
#endif
  }
  return 0;
}
