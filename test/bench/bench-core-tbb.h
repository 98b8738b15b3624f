/* bench-core's workloads with oneTBB (bench-core-tbb.cpp), built in when
 * meson finds it (BENCH_HAVE_TBB). Each returns the seconds its workload
 * took on nthreads threads (bench_tbb_init sets them). */
#ifndef BENCH_CORE_TBB_H
#define BENCH_CORE_TBB_H

#ifdef __cplusplus
extern "C" {
#endif

void bench_tbb_init(int nthreads);
void bench_tbb_fini(void);
double bench_tbb_independent(int nthreads, long n);
double bench_tbb_nested(int nthreads, long n);
double bench_tbb_chain(int nthreads, long n);
double bench_tbb_fan(int nthreads, long rounds, int fan);
double bench_tbb_wide(int nthreads, long steps, int width, int k);
/* bench-core's stencil (d): width tasks a step, steps steps, each
 * busy(iters, ...) on the three values of the row before; grid: two rows
 * of width doubles */
double bench_tbb_stencil(int nthreads, int width, long steps, long iters,
                         double (*busy)(long, double), double *grid);

/* A lone empty task's round trip: enqueued, run by a worker thread, the
 * caller blocked until it ended */
double bench_tbb_lone(int nthreads);
/* oneTBB's scheduler started (its threads woken by a parallel run) and
 * ended (tbb::finalize joins them); -1 when it could not end it (another
 * part of the process holds it) */
double bench_tbb_start_stop(int nthreads);

#ifdef __cplusplus
}
#endif

#endif
