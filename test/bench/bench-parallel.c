/*
 * bench-parallel: data-parallel operations (tdm_parallel_submit) in
 * virtual time. A range of 4 Mi elements (10 ns of one core each on
 * average, 4 bytes in and 4 out each), regular or irregular (an
 * element's cost from 1 to 10 times the base, highest in the middle),
 * cut as the runtime cuts it and placed by heft, on machines from 2
 * cores + an integrated GPU to 16 cores + a discrete GPU. The adaptive
 * split on a first run (the model empty: the cut counts each device as
 * TDM_PARALLEL_UNKNOWN_UNITS workers and begins with small probes while
 * heft calibrates) and a calibrated one (the cut and the placement from
 * the model the first run left); for comparison the static split (one
 * chunk per worker, in proportion to the declared speeds), the CPU cores
 * alone and the devices alone (adaptive). Each row: chunks, makespan and
 * its ratio to the machine's bound (the work over the machine's speed,
 * every worker busy), each class's share of the work (to compare with
 * its share of the speed, in the heading), and the idle tail (from the
 * first class done to the end). Exact: the same on every run.
 */
#include <stdio.h>
#include <stdlib.h>

#include "vt-parallel.h"

static builder b;

static const struct {
  const char *name, *desc;
} machines[] = {
    {"2 cores + integrated GPU (3x)", "cpu:workers=2;igpu:speedup=3,memory=shared"},
    {"2 cores + discrete GPU (10x)", "cpu:workers=2;gpu:speedup=10,latency=10us,bandwidth=10G"},
    {"2 cores + 2 discrete GPUs (10x, 5x)",
     "cpu:workers=2;gpu0:speedup=10,latency=10us,bandwidth=10G;"
     "gpu1:speedup=5,latency=10us,bandwidth=10G"},
    {"16 cores + discrete GPU (10x)",
     "cpu:workers=16;gpu:speedup=10,latency=10us,bandwidth=10G"},
};

static void row(const char *what, const tdm_vt_machine *m, const vt_op_figures *r,
                double bound) {
  printf("  %-22s %6u %9.2f %7.3f  ", what, r->chunks, 1e3 * r->makespan, r->makespan / bound);
  char shares[96] = "";
  size_t at = 0;
  for (unsigned c = 0; c < m->nclasses; c++)
    at += (size_t)snprintf(shares + at, sizeof shares - at, "%s%.1f", c ? " / " : "",
                           100 * r->share[c]);
  printf("%-22s %8.3f\n", shares, 1e3 * r->tail);
}

int main(int argc, char **argv) {
  size_t n = (size_t)1 << 22, grain = 1024;
  if (argc > 1)
    n = strtoull(argv[1], NULL, 0);
  printf("bench-parallel: a data-parallel operation in virtual time (exact), %zu elements, "
         "grain %zu, heft\n",
         n, grain);
  for (size_t k = 0; k < sizeof machines / sizeof machines[0]; k++) {
    tdm_vt_machine m;
    char err[128];
    if (tdm__vt_parse_machine(machines[k].desc, NULL, 0, &m, err, sizeof err)) {
      printf("%s: %s\n", machines[k].name, err);
      return 1;
    }
    for (int irregular = 0; irregular < 2; irregular++) {
      tdm_perfmodel *model = tdm__model_new();
      vt_op_figures r;
      if (!model || vt_op_run_once(&m, &b, n, grain, irregular, model, &r))
        return 1;
      double bound = r.bound;
      char ideal[96] = "";
      size_t at = 0;
      for (unsigned c = 0; c < m.nclasses; c++)
        at += (size_t)snprintf(ideal + at, sizeof ideal - at, "%s%.1f", c ? " / " : "",
                               100 * r.ideal[c]);
      printf("\n%s, %s: bound %.2f ms, shares of the speed %s %%\n", machines[k].name,
             irregular ? "irregular (1-10x)" : "regular", 1e3 * bound, ideal);
      printf("  %-22s %6s %9s %7s  %-22s %8s\n", "split", "chunks", "ms", "/bound",
             "shares of the work %", "tail ms");
      row("adaptive, first run", &m, &r, bound);
      if (vt_op_run_once(&m, &b, n, grain, irregular, model, &r))
        return 1;
      row("adaptive, calibrated", &m, &r, bound);
      tdm__model_free(model);
      if (vt_op_run(&m, &b, n, grain, irregular, true, NULL, &r))
        return 1;
      row("static (by speed)", &m, &r, bound);
      tdm_vt_machine one = m;
      one.nclasses = 1; /* the CPU cores alone */
      if (vt_op_run_once(&one, &b, n, grain, irregular, NULL, &r))
        return 1;
      row("CPU only", &one, &r, bound);
      one = m;
      one.classes[0].workers = 0; /* the devices alone, calibrated */
      model = tdm__model_new();
      if (!model || vt_op_run_once(&one, &b, n, grain, irregular, model, &r) ||
          vt_op_run_once(&one, &b, n, grain, irregular, model, &r))
        return 1;
      tdm__model_free(model);
      row("devices only", &one, &r, bound);
    }
  }
  return 0;
}
