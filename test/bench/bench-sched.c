/*
 * bench-sched: tiled GEMM, tiled Cholesky, independent tasks and a 1-D
 * stencil, at 8x8 and 16x16 tiles (--big: 32x32 too), scheduled in
 * virtual time (runtime/sched/vtime.c) on emulated machines, from 2 cores
 * to 64 cores + 8 GPUs, under each policy: makespan and its ratio to the
 * lower bound on a first run (the model empty: heft calibrates) and on a
 * calibrated run (the model the first run left), tasks on the CPU cores
 * and elsewhere, bytes moved; each machine's bound with its two parts
 * (the critical path, the area) and which one bounds, and a reference:
 * the makespan of HEFT knowing the whole graph and the true times ahead,
 * copies free (tdm__vt_reference), a schedule that exists; calibrated
 * runs are also given against it (/ref). Every task and copy
 * takes its modelled duration, so the figures are exact and the same on
 * every run; they say how the policies place work, not how fast this
 * machine is.
 *
 * Tile: 10 ms of one CPU core for gemm, 5 ms for trsm and syrk, 1.7 ms for
 * potrf, 2 MiB of data. GPU speed-ups over a core: gemm 10, trsm and syrk
 * 8, potrf 2 (a discrete GPU); the integrated GPU is a third of that and
 * needs no copies; an efficiency core (hybrid chips) 0.6 of a core;
 * links: 10 us latency, 10 GB/s (PCIe 3 x16 in practice), one per GPU or
 * one per pair of GPUs (behind a PCIe switch).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/perfmodel.h"
#include "vt-graphs.h"

static builder b;

/* The policies shown: all of them, or for the big graphs heft and ws
 * (eager and random add nothing there). */
static void table(const char *what, unsigned nt, void (*build)(builder *, unsigned),
                  bool big) {
  build(&b, nt);
  tdm_vt_graph g = graph(&b);
  printf("\n%s, %ux%u tiles, %u tasks\n", what, nt, nt, b.ntasks);
  printf("%-38s %-7s %12s %7s %12s %7s %6s %14s %10s\n", "machine", "policy", "first run ms",
         "/bound", "calibrated", "/bound", "/ref", "tasks CPU/rest", "MiB moved");
  for (size_t k = 0; k < VT_NMACHINES; k++) {
    tdm_vt_machine m = vt_machine(&vt_machines[k]);
    tdm_vt_bound bd = tdm__vt_bound(&m, &g);
    double lb = bd.bound, ref = tdm__vt_reference(&m, &g);
    printf("%-38s bound %.1f ms (%s; critical path %.1f, area %.1f); reference %.1f ms "
           "(%.3f)\n",
           vt_machines[k].name, lb * 1e3, bd.by, bd.critical_path * 1e3, bd.area * 1e3, ref * 1e3,
           ref / lb);
    for (int p = TDM_POLICY_HEFT; p <= (big ? TDM_POLICY_WS : TDM_POLICY_RANDOM); p++) {
      /* the first run starts with an empty model; the calibrated one with
       * what the first learnt */
      tdm_perfmodel *model = tdm__model_new();
      tdm_vt_result first, r;
      if (!model ||
          tdm__vt_run_model(&m, &g, (tdm_policy)p, 42, model, &first) != TDM_OK) {
        printf("%-38s %-7s failed\n", "", tdm__policy_name((tdm_policy)p));
        tdm__model_free(model);
        continue;
      }
      if (tdm__vt_run_model(&m, &g, (tdm_policy)p, 42, model, &r) != TDM_OK) {
        printf("%-38s %-7s failed\n", "", tdm__policy_name((tdm_policy)p));
        tdm__vt_result_free(&first);
        tdm__model_free(model);
        continue;
      }
      unsigned rest = 0;
      for (unsigned c = 1; c < m.nclasses; c++)
        rest += r.tasks_per_class[c];
      char tasks[32];
      snprintf(tasks, sizeof tasks, "%u/%u", r.tasks_per_class[0], rest);
      printf("%-38s %-7s %12.1f %7.3f %12.1f %7.3f %6.3f %14s %10.1f\n", "",
             tdm__policy_name((tdm_policy)p), first.makespan * 1e3, first.makespan / lb,
             r.makespan * 1e3, r.makespan / lb, r.makespan / ref, tasks,
             (double)r.bytes_moved / (1 << 20));
      tdm__vt_result_free(&first);
      tdm__vt_result_free(&r);
      tdm__model_free(model);
    }
  }
}

/* One machine given on the command line, e.g.
 *   bench-sched --machine "cpu:workers=16;gpu:workers=1,speedup=20,latency=5us,bandwidth=25G"
 * (the grammar is tdm__vt_parse_machine's, codelets gemm, small, potrf,
 * trsm, syrk), with the tiles per side. */
static int one_machine(const char *text, unsigned nt) {
  static const char *const names[] = {"gemm", "small", "potrf", "trsm", "syrk"};
  tdm_vt_machine m;
  char err[160];
  if (tdm__vt_parse_machine(text, names, 5, &m, err, sizeof err)) {
    fprintf(stderr, "bench-sched: %s\n", err);
    return 2;
  }
  void (*builds[2])(builder *, unsigned) = {tiled_gemm, tiled_cholesky};
  const char *what[2] = {"tiled GEMM", "tiled Cholesky"};
  for (int k = 0; k < 2; k++) {
    builds[k](&b, nt);
    tdm_vt_graph g = graph(&b);
    double lb = tdm__vt_lower_bound(&m, &g);
    printf("\n%s, %ux%u tiles, %u tasks, on %s\n", what[k], nt, nt, b.ntasks, text);
    for (int p = TDM_POLICY_HEFT; p <= TDM_POLICY_RANDOM; p++) {
      tdm_vt_result r;
      if (tdm__vt_run(&m, &g, (tdm_policy)p, 42, &r) != TDM_OK) {
        printf("  %-7s failed (a codelet no class runs?)\n", tdm__policy_name((tdm_policy)p));
        continue;
      }
      printf("  %-7s makespan %10.1f ms, %.3f of the bound, %.1f MiB moved; tasks:",
             tdm__policy_name((tdm_policy)p), r.makespan * 1e3, r.makespan / lb,
             (double)r.bytes_moved / (1 << 20));
      for (unsigned c = 0; c < m.nclasses; c++)
        printf(" %s %u", m.classes[c].name, r.tasks_per_class[c]);
      printf("\n");
      tdm__vt_result_free(&r);
    }
  }
  return 0;
}

/* Each task's bottom level on m (its mean time over the workers that can
 * run it, plus the largest bottom level of a successor) as its priority,
 * scaled to 0 .. 1e6: what an application that knows its graph would
 * give (the builder lists a task after its predecessors). */
static void bottom_levels(const tdm_vt_machine *m) {
  static double w[VT_MAX_TASKS], bl[VT_MAX_TASKS];
  for (unsigned i = 0; i < b.ntasks; i++)
    bl[i] = w[i] = tdm__vt_mean_time(m, &b.tasks[i]);
  double most = 0;
  for (unsigned i = b.ntasks; i-- > 0;) { /* bl[i] final: its successors come later */
    for (unsigned k = 0; k < b.tasks[i].ndeps; k++) {
      unsigned p = b.tasks[i].deps[k];
      if (w[p] + bl[i] > bl[p])
        bl[p] = w[p] + bl[i];
    }
    most = bl[i] > most ? bl[i] : most;
  }
  for (unsigned i = 0; i < b.ntasks; i++)
    b.tasks[i].priority = most > 0 ? (int)(1e6 * bl[i] / most) : 0;
}

/* heft calibrated with no priorities (the bench's graphs carry none of
 * the user's) and with bottom levels as priorities, at 16x16 and 32x32. */
static void priorities(void) {
  printf("heft, calibrated, against the bound: no priorities / bottom levels as priorities\n");
  printf("%-20s %-38s %16s %16s\n", "graph", "machine", "16x16", "32x32");
  for (size_t k = 0; k < VT_NGRAPHS; k++)
    for (size_t j = 0; j < VT_NMACHINES; j++) {
      tdm_vt_machine m = vt_machine(&vt_machines[j]);
      char cell[2][40];
      for (unsigned s = 0; s < 2; s++) {
        double ratio[2];
        for (int with = 0; with < 2; with++) {
          vt_graphs[k].build(&b, s ? 32 : 16);
          if (with)
            bottom_levels(&m);
          tdm_vt_graph g = graph(&b);
          tdm_perfmodel *model = tdm__model_new();
          tdm_vt_result r;
          ratio[with] = -1;
          for (int run = 0; model && run < 2; run++) /* the second calibrated */
            if (tdm__vt_run_model(&m, &g, TDM_POLICY_HEFT, 42, model, &r) == TDM_OK) {
              ratio[with] = r.makespan / tdm__vt_bound(&m, &g).bound;
              tdm__vt_result_free(&r);
            }
          tdm__model_free(model);
        }
        snprintf(cell[s], sizeof cell[s], "%.3f / %.3f", ratio[0], ratio[1]);
      }
      printf("%-20s %-38s %16s %16s\n", j ? "" : vt_graphs[k].name, vt_machines[j].name,
             cell[0], cell[1]);
    }
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--priorities")) {
    priorities();
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "--machine")) {
    unsigned nt = argc >= 5 && !strcmp(argv[3], "--tiles") ? (unsigned)atoi(argv[4]) : 8;
    if (nt < 1 || nt > VT_MAX_TILES) {
      fprintf(stderr, "bench-sched: --tiles between 1 and %d\n", VT_MAX_TILES);
      return 2;
    }
    return one_machine(argv[2], nt);
  }
  /* the table up to 16x16 tiles (seconds); --big: 32x32 too (minutes) */
  unsigned big = argc == 2 && !strcmp(argv[1], "--big") ? VT_MAX_TILES : 16;
  if (argc > 1 && big != VT_MAX_TILES) {
    fprintf(stderr,
            "usage: bench-sched [--big | --priorities | --machine DESCRIPTION [--tiles N]]\n");
    return 2;
  }
  printf("bench-sched: schedules in virtual time (exact; the same on every run)\n");
  for (unsigned size = 8; size <= big; size *= 2)
    for (size_t k = 0; k < VT_NGRAPHS; k++)
      table(vt_graphs[k].name, size, vt_graphs[k].build, size > 8);
  return 0;
}
