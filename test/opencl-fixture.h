/*
 * What the tests of tasks on a real OpenCL device share (test-opencl-run,
 * test-opencl-cache, test-opencl-failures): PoCL, admitted as a device and
 * made to behave as an integrated GPU (no copies) or as a discrete one
 * (copies), a runtime on it, its counters, SAXPY in both variants, and the
 * programs' common main.
 */
#ifndef TDM_TEST_OPENCL_FIXTURE_H
#define TDM_TEST_OPENCL_FIXTURE_H

#include "common.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tandem/opencl.h"

#define N 4096 /* elements of a vector */
#define OTHER_UID 65534 /* a second local user (as root) */

extern bool discrete;          /* PoCL behaves as a discrete GPU */
extern uint64_t memory_limit;  /* for the next runtime */
extern int writeback;          /* for the next runtime */
extern char cache_dir[128];    /* a fresh one per run of a program */
extern _Atomic unsigned device_events; /* tdm_config.device_event_fn calls */
extern _Atomic unsigned cpu_runs;      /* saxpy's CPU variant's runs */
extern _Atomic unsigned kernel_events; /* tdm_config.kernel_event_fn calls */
extern char kernel_event_codelet[64];  /* the last one's codelet */

/* A runtime with PoCL's device (admitted when `admit`), its log in log. */
tdm_runtime *device_runtime(test_log *log, int admit);
/* The same, under placement policy `policy` (NULL: the default), with
 * tdm_config.opencl_peer `peer`. */
tdm_runtime *device_runtime_with(test_log *log, int admit, const char *policy, int peer);
/* The device record PoCL is, and its counters. */
int the_device(tdm_runtime *rt);
tdm_device_counters counters(tdm_runtime *rt);

/* y = a * x + y: OpenCL only, CPU only, both. */
extern const tdm_opencl_variant saxpy_cl;
extern const tdm_codelet saxpy_gpu_only, saxpy_cpu_only, saxpy_both;
void saxpy_cpu(const tdm_buffer *b, const void *args, size_t size);
/* N floats first + step * (i % 100), from tdm_malloc. */
float *array(float first, float step);
/* p (N floats) registered with rt as a vector. */
tdm_handle *vector_of(tdm_runtime *rt, float *p);
/* Submits cl on x, y with a. */
void saxpy(tdm_runtime *rt, const tdm_codelet *cl, tdm_handle *x, tdm_handle *y, float a);
/* The usual end of a run: the runtime destroyed (it waits and brings its
 * handles home), then x and y freed. */
void run_end(tdm_runtime *rt, float *x, float *y);

/* A program's main: argv is integrated|discrete [two-devices|two-users]
 * (only those modes in `modes` a program takes); runs `tests` (one-device
 * modes), `two` (two-devices) or `users` (two-users, as root), each
 * possibly empty (SKIP then), in a fresh cache directory. 77 (SKIP)
 * without PoCL's device, or two of them for two-devices. */
int opencl_fixture_main(int argc, char **argv, const char *program,
                        const struct CMUnitTest *tests, size_t ntests,
                        const struct CMUnitTest *two, size_t ntwo,
                        const struct CMUnitTest *users, size_t nusers);

#endif
