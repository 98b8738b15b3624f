/*
 * mandelbrot: one data-parallel operation (tdm_parallel_submit) over an
 * image's rows, shared by every CPU core and every device Tandem finds.
 * Rows inside the set cost the most iterations, rows outside few: an
 * irregular range, which Tandem cuts into chunks of decreasing size and
 * hands out by speed. Writes a PGM image and prints where the rows went.
 *
 *   mandelbrot [--size WxH] [--iterations N] [--output FILE]
 *              [--cpu-only | --devices-only] [--static] [--quiet]
 *
 * --devices-only runs every row on the devices (TDM_PARALLEL_NO_CPU;
 * without one it is refused, TDM_ERR_NO_DEVICE, and the program exits
 * 77). --static cuts the rows once, one chunk per worker in proportion
 * to their speeds (TDM_PARALLEL_STATIC), to compare with the adaptive
 * split. By default an OpenCL device on the CPU cores (PoCL) takes no
 * rows beside the CPU workers: it runs on the same cores.
 *
 * The arithmetic is fixed-point (64-bit integers, 28 fractional bits),
 * so that the CPU function and the OpenCL kernel compute the same image
 * to the bit wherever a row runs; the program checks the image against
 * a row computed again on this thread, every 7th row, and exits 1 if one
 * differs. TANDEM_DEVICES, TANDEM_SIM and the other variables of
 * docs/environment.md choose the devices (e.g. TANDEM_SIM="gpu:speedup=10"
 * to emulate a discrete GPU).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tandem.h>
#include <tandem/opencl.h>

#define FRAC 28 /* fractional bits of the fixed point */

typedef struct args {
  int64_t x0, y0, step; /* the top-left pixel's point and a pixel's side */
  uint32_t iterations;
  uint32_t pad;
} args;

/* Iterations of z = z^2 + c from 0 until |z| > 2, at most `limit`. */
static unsigned escape(int64_t cr, int64_t ci, unsigned limit) {
  int64_t zr = 0, zi = 0;
  const int64_t four = (int64_t)4 << FRAC;
  unsigned k = 0;
  while (k < limit) {
    int64_t rr = (zr * zr) >> FRAC, ii = (zi * zi) >> FRAC;
    if (rr + ii > four)
      break;
    int64_t ri = (zr * zi) >> (FRAC - 1);
    zr = rr - ii + cr;
    zi = ri + ci;
    k++;
  }
  return k;
}

static unsigned char shade(unsigned k, unsigned limit) {
  return k >= limit ? 0 : (unsigned char)(255 - (k * 255) / limit);
}

/* The CPU function: rows range->begin[0] .. end[0] of the image, whose
 * buffer starts at the first of them. */
static void rows_cpu(const tdm_buffer *b, const tdm_range *r, const void *p, size_t size) {
  (void)size;
  const args *a = p;
  for (size_t y = r->begin[0]; y < r->end[0]; y++) {
    unsigned char *row = (unsigned char *)b[0].ptr + (y - r->begin[0]) * b[0].ld;
    for (size_t x = 0; x < b[0].cols; x++)
      row[x] = shade(escape(a->x0 + (int64_t)x * a->step, a->y0 - (int64_t)y * a->step,
                            a->iterations),
                     a->iterations);
  }
}

static const tdm_opencl_variant rows_cl = {
    .source =
        "typedef struct { long x0, y0, step; uint iterations, pad; } args;\n"
        "__kernel void rows(__global uchar *img, ulong rows, ulong cols, ulong ld, args a) {\n"
        "  size_t x = get_global_id(0), y = get_global_id(1);\n"
        "  long cr = a.x0 + (long)x * a.step, ci = a.y0 - (long)y * a.step;\n"
        "  long zr = 0, zi = 0, four = (long)4 << 28;\n"
        "  uint k = 0;\n"
        "  while (k < a.iterations) {\n"
        "    long rr = (zr * zr) >> 28, ii = (zi * zi) >> 28;\n"
        "    if (rr + ii > four) break;\n"
        "    long ri = (zr * zi) >> 27;\n"
        "    zr = rr - ii + cr;\n"
        "    zi = ri + ci;\n"
        "    k++;\n"
        "  }\n"
        "  img[(y - get_global_offset(1)) * ld + x] =\n"
        "      k >= a.iterations ? 0 : (uchar)(255 - (k * 255) / a.iterations);\n"
        "}\n",
    .kernel = "rows"};

static const tdm_codelet rows = {
    .name = "mandelbrot_rows", .nbuffers = 1, .modes = {TDM_W}, .opencl = &rows_cl};

int main(int argc, char **argv) {
  size_t w = 1024, h = 768;
  unsigned iterations = 512;
  const char *output = "mandelbrot.pgm";
  int cpu_only = 0, devices_only = 0, fixed = 0, quiet = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) {
      if (sscanf(argv[++i], "%zux%zu", &w, &h) != 2 || !w || !h || w > 1 << 15 || h > 1 << 15) {
        fprintf(stderr, "mandelbrot: --size WxH, each 1 to 32768\n");
        return 2;
      }
    } else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) {
      iterations = (unsigned)strtoul(argv[++i], NULL, 10);
      if (!iterations || iterations > 1u << 20) {
        fprintf(stderr, "mandelbrot: --iterations 1 to 1048576\n");
        return 2;
      }
    } else if (!strcmp(argv[i], "--output") && i + 1 < argc) {
      output = argv[++i];
    } else if (!strcmp(argv[i], "--cpu-only")) {
      cpu_only = 1;
    } else if (!strcmp(argv[i], "--devices-only")) {
      devices_only = 1;
    } else if (!strcmp(argv[i], "--static")) {
      fixed = 1;
    } else if (!strcmp(argv[i], "--quiet")) {
      quiet = 1;
    } else {
      fprintf(stderr, "usage: mandelbrot [--size WxH] [--iterations N] [--output FILE] "
                      "[--cpu-only | --devices-only] [--static] [--quiet]\n");
      return 2;
    }
  }
  unsigned char *img = calloc(w * h, 1);
  if (!img) {
    fprintf(stderr, "mandelbrot: out of memory\n");
    return 1;
  }
  /* the view: x in [-2.2, 0.8], centred vertically */
  int64_t one = (int64_t)1 << FRAC, step = (int64_t)(3 * one) / (int64_t)w;
  args a = {.x0 = -22 * one / 10, .y0 = (int64_t)(h / 2) * step, .step = step,
            .iterations = iterations};

  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(NULL, &rt);
  if (st) {
    fprintf(stderr, "tdm_runtime_create: %s\n", tdm_strerror(st));
    free(img);
    return 1;
  }
  tdm_handle *himg;
  st = tdm_register_matrix(rt, img, w, h, w, 1, &himg);
  tdm_parallel_stats stats = {.struct_size = sizeof stats};
  tdm_parallel_desc d = {.struct_size = sizeof d,
                         .codelet = &rows,
                         .cpu_fn = rows_cpu,
                         .range = {h, w},
                         .handles = {himg},
                         .split_mask = 1,
                         .args = &a,
                         .args_size = sizeof a,
                         .stats = &stats};
  d.flags = (cpu_only ? TDM_PARALLEL_NO_DEVICES : 0) | (devices_only ? TDM_PARALLEL_NO_CPU : 0) |
            (fixed ? TDM_PARALLEL_STATIC : 0);
  tdm_task *done = NULL;
  if (!st)
    st = tdm_parallel_submit(rt, &d, &done);
  if (!st)
    st = tdm_task_wait(done);
  tdm_task_release(done);
  tdm_status un = himg ? tdm_handle_unregister(himg) : TDM_OK;
  if (!st)
    st = un;
  if (st) {
    fprintf(stderr, "mandelbrot: %s\n", tdm_strerror(st));
    tdm_runtime_destroy(rt);
    free(img);
    return devices_only && st == TDM_ERR_NO_DEVICE ? 77 : 1; /* 77: none here (a test skips) */
  }
  if (!quiet) {
    printf("%zux%zu, %u iterations: %u chunks, %.2f ms, idle tail %.2f ms, %.2f MB copied\n", w,
           h, iterations, stats.chunks, 1e3 * stats.makespan, 1e3 * stats.tail,
           1e-6 * (double)stats.bytes_moved);
    for (unsigned c = 0; c < stats.nclasses; c++) {
      tdm_device_info di = {.struct_size = sizeof di};
      const char *name = "CPU workers";
      if (c && tdm_runtime_device(rt, c - 1, &di) == TDM_OK)
        name = di.name;
      printf("  %-40s %5llu chunks, %6.1f%% of the rows, done at %.2f ms\n", name,
             (unsigned long long)stats.class_chunks[c],
             100.0 * (double)stats.class_elements[c] / (double)(w * h),
             1e3 * stats.class_end[c]);
    }
  }
  tdm_runtime_destroy(rt);

  /* every 7th row again, here */
  int wrong = 0;
  unsigned char *row = malloc(w);
  for (size_t y = 0; row && y < h && !wrong; y += 7) {
    tdm_buffer b = {.ptr = row, .elem_size = 1, .rows = 1, .cols = w, .ld = w};
    tdm_range r = {.begin = {y, 0}, .end = {y + 1, w}};
    rows_cpu(&b, &r, &a, sizeof a);
    wrong = memcmp(row, img + y * w, w) != 0;
    if (wrong)
      fprintf(stderr, "mandelbrot: row %zu differs from the row computed here\n", y);
  }
  free(row);
  FILE *f = fopen(output, "wb");
  if (!f || fprintf(f, "P5\n%zu %zu\n255\n", w, h) < 0 || fwrite(img, 1, w * h, f) != w * h) {
    fprintf(stderr, "mandelbrot: cannot write %s\n", output);
    wrong = 1;
  }
  if (f && fclose(f))
    wrong = 1;
  free(img);
  if (!quiet && !wrong)
    printf("wrote %s\n", output);
  return wrong;
}
