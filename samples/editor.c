/*
 * The shape of an application embedding Tandem: an image editor's event
 * loop stays responsive while a filter pipeline runs on the cores (and an
 * OpenCL device, when there is one).
 *
 *  - The image (a binary PPM, or a generated one) is cut in strips of
 *    rows, each a vector handle; each pass runs two filters on each strip
 *    (brighten, then contrast), with CPU and OpenCL variants, and a task
 *    pinned to this thread "presents" each finished strip (where a real
 *    editor would upload a texture).
 *  - Every task joins one group: a progress line on the terminal is drawn
 *    from the group's progress, delivered on this thread.
 *  - The loop polls standard input and the runtime's event descriptor:
 *    tdm_dispatch runs the progress calls and the pinned tasks. Pressing
 *    Enter (or --cancel-after MS) cancels the group: tasks not started
 *    never start, every strip keeps the last version produced.
 *  - Back-pressure: the loop submits with tdm_submit_try and, when the
 *    runtime holds as many unfinished tasks as it allows
 *    (tdm_config.max_pending), goes back to polling instead of blocking.
 *  - The result is written out, and checked against a plain loop: a
 *    cancelled run must leave each strip at a state the pipeline passes
 *    through (some stages done), never anything else.
 *
 * Usage: editor [--input IN.ppm] [--output OUT.ppm] [--size WxH]
 *               [--passes N] [--cancel-after MS] [--quiet]
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tandem.h>
#include <tandem/opencl.h>

/* ---- the filters: integer arithmetic, so that both variants agree ---- */

typedef struct filter_args {
  uint32_t k; /* gain or contrast, in 1/256 */
} filter_args;

static uint8_t brighten_px(uint8_t p, uint32_t k) {
  uint32_t v = ((uint32_t)p * k) >> 8;
  return (uint8_t)(v > 255 ? 255 : v);
}

static uint8_t contrast_px(uint8_t p, uint32_t k) {
  int32_t v = ((((int32_t)p - 128) * (int32_t)k) >> 8) + 128;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void brighten(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  uint8_t *p = b[0].ptr;
  uint32_t k = ((const filter_args *)args)->k;
  for (size_t i = 0; i < b[0].rows; i++)
    p[i] = brighten_px(p[i], k);
}

static void contrast(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  uint8_t *p = b[0].ptr;
  uint32_t k = ((const filter_args *)args)->k;
  for (size_t i = 0; i < b[0].rows; i++)
    p[i] = contrast_px(p[i], k);
}

static const tdm_opencl_variant brighten_cl = {
    .source = "typedef struct { uint k; } filter_args;\n"
              "__kernel void brighten(__global uchar *p, ulong n, filter_args a) {\n"
              "  size_t i = get_global_id(0);\n"
              "  p[i] = (uchar)min((uint)p[i] * a.k >> 8, 255u);\n"
              "}\n",
    .kernel = "brighten"};

static const tdm_opencl_variant contrast_cl = {
    .source = "typedef struct { uint k; } filter_args;\n"
              "__kernel void contrast(__global uchar *p, ulong n, filter_args a) {\n"
              "  size_t i = get_global_id(0);\n"
              "  int v = ((((int)p[i] - 128) * (int)a.k) >> 8) + 128;\n"
              "  p[i] = (uchar)clamp(v, 0, 255);\n"
              "}\n",
    .kernel = "contrast"};

static const tdm_codelet cl_brighten = {.name = "brighten", .cpu_fn = brighten,
                                        .nbuffers = 1, .modes = {TDM_RW},
                                        .opencl = &brighten_cl};
static const tdm_codelet cl_contrast = {.name = "contrast", .cpu_fn = contrast,
                                        .nbuffers = 1, .modes = {TDM_RW},
                                        .opencl = &contrast_cl};

/* Pinned to the application's thread: "uploads" a finished strip. */
static unsigned presented;

static void present(const tdm_buffer *b, const void *args, size_t size) {
  (void)b;
  (void)args;
  (void)size;
  presented++; /* this thread only: no lock */
}

static const tdm_codelet cl_present = {.name = "present", .cpu_fn = present, .nbuffers = 1,
                                       .modes = {TDM_R}};

/* ---- the image --------------------------------------------------------------- */

typedef struct image {
  unsigned w, h;
  uint8_t *px; /* w * h * 3 bytes */
} image;

static int read_ppm(const char *path, image *im) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "editor: %s: %s\n", path, strerror(errno));
    return -1;
  }
  unsigned maxval;
  int ok = fscanf(f, "P6 %u %u %u", &im->w, &im->h, &maxval) == 3 && maxval == 255 &&
           im->w > 0 && im->h > 0 && im->w <= 65536 && im->h <= 65536 && fgetc(f) != EOF;
  size_t n = ok ? (size_t)im->w * im->h * 3 : 0;
  im->px = ok ? tdm_malloc(n) : NULL;
  ok = ok && im->px && fread(im->px, 1, n, f) == n;
  fclose(f);
  if (!ok)
    fprintf(stderr, "editor: %s: not a binary PPM with 8-bit samples that could be read\n",
            path);
  return ok ? 0 : -1;
}

static int write_ppm(const char *path, const image *im) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "editor: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t n = (size_t)im->w * im->h * 3;
  int ok = fprintf(f, "P6\n%u %u\n255\n", im->w, im->h) > 0 && fwrite(im->px, 1, n, f) == n;
  ok = (fclose(f) == 0) && ok;
  if (!ok)
    fprintf(stderr, "editor: %s: write failed\n", path);
  return ok ? 0 : -1;
}

static void generate(image *im) {
  im->px = tdm_malloc((size_t)im->w * im->h * 3);
  if (!im->px)
    return;
  for (unsigned y = 0; y < im->h; y++)
    for (unsigned x = 0; x < im->w; x++) {
      uint8_t *p = im->px + ((size_t)y * im->w + x) * 3;
      p[0] = (uint8_t)(x * 255 / im->w);
      p[1] = (uint8_t)(y * 255 / im->h);
      p[2] = (uint8_t)((x ^ y) & 0xff);
    }
}

/* ---- the loop ------------------------------------------------------------------ */

static int quiet;

/* data: the number of tasks the whole pipeline will have submitted */
static void on_progress(void *data, const tdm_group_progress *p) {
  if (quiet)
    return;
  double planned = *(const double *)data, f = p->cost_ended / planned;
  char bar[31];
  for (int i = 0; i < 30; i++)
    bar[i] = i < (int)(30 * f) ? '#' : ' ';
  bar[30] = 0;
  printf("\r[%s] %3.0f%%  %llu tasks ended, %llu queued%s", bar, 100 * f,
         (unsigned long long)p->ended, (unsigned long long)(p->submitted - p->ended),
         p->cancel_requested ? "  (cancelling)" : "");
  fflush(stdout);
}

static void wake_up(void *data) {
  (void)data; /* its work is done: the loop woke up to submit more */
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

#define STRIP_ROWS 16
static const uint32_t GAIN = 300, CONTRAST = 280;

int main(int argc, char **argv) {
  const char *in = NULL, *out = "editor-out.ppm";
  image im = {.w = 2048, .h = 1536};
  unsigned passes = 8;
  double cancel_after = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quiet"))
      quiet = 1;
    else if (v && !strcmp(a, "--input"))
      in = argv[++i];
    else if (v && !strcmp(a, "--output"))
      out = argv[++i];
    else if (v && !strcmp(a, "--size") && sscanf(v, "%ux%u", &im.w, &im.h) == 2 && im.w &&
             im.h && im.w <= 16384 && im.h <= 16384)
      i++;
    else if (v && !strcmp(a, "--passes") && sscanf(v, "%u", &passes) == 1 && passes &&
             passes <= 100)
      i++;
    else if (v && !strcmp(a, "--cancel-after") && sscanf(v, "%lf", &cancel_after) == 1)
      i++;
    else {
      fprintf(stderr, "usage: editor [--input IN.ppm] [--output OUT.ppm] [--size WxH] "
                      "[--passes N] [--cancel-after MS] [--quiet]\n");
      return 2;
    }
  }
  if (in ? read_ppm(in, &im) : (generate(&im), im.px ? 0 : -1))
    return 1;
  size_t row = (size_t)im.w * 3, nstrips = (im.h + STRIP_ROWS - 1) / STRIP_ROWS;
  uint8_t *orig = malloc(row * im.h);
  tdm_handle **strips = calloc(nstrips, sizeof *strips);
  if (!orig || !strips) {
    fprintf(stderr, "editor: out of memory\n");
    return 1;
  }
  memcpy(orig, im.px, row * im.h);

  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.max_pending = 256; /* back-pressure: the loop never holds more */
  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(&cfg, &rt);
  if (st) {
    fprintf(stderr, "editor: %s\n", tdm_strerror(st));
    return 1;
  }
  /* the filters' OpenCL programs build now, on a thread of the runtime,
   * while the image is being cut (a first task would also start them) */
  tdm_codelet_build(rt, &cl_brighten, NULL, NULL);
  tdm_codelet_build(rt, &cl_contrast, NULL, NULL);
  tdm_group *g;
  double planned = (double)nstrips * (2 * passes + 1); /* each task weighs 1 */
  tdm_group_desc gd = {.name = "filters", .progress_fn = on_progress, .progress_data = &planned,
                       .progress_hz = 10, .progress_on_dispatch = 1};
  if ((st = tdm_group_create(rt, &gd, &g))) {
    fprintf(stderr, "editor: %s\n", tdm_strerror(st));
    return 1;
  }
  for (size_t s = 0; s < nstrips && !st; s++) {
    size_t rows = s + 1 < nstrips ? STRIP_ROWS : im.h - s * STRIP_ROWS;
    st = tdm_register_vector(rt, im.px + s * STRIP_ROWS * row, rows * row, 1, &strips[s]);
  }
  if (st) {
    fprintf(stderr, "editor: %s\n", tdm_strerror(st));
    return 1;
  }
  printf("editor: %ux%u image, %zu strips x %u passes on %u workers (%s); %s\n", im.w, im.h,
         nstrips, passes, tdm_runtime_nworkers(rt),
         tdm_runtime_nworkers(rt) > tdm_runtime_ncpu_workers(rt) ? "with a device" : "CPU",
         cancel_after >= 0 ? "cancelled by a timer" : "Enter cancels");

  /* the work, in the order it is submitted: per pass, per strip, two
   * filters, and in the last pass the strip's presentation */
  size_t strip = 0, pass = 0, stage = 0, submitted = 0;
  int fd = tdm_runtime_event_fd(rt);
  int interactive = isatty(0) && cancel_after < 0;
  double t0 = now_ms();
  int cancelled = 0;
  tdm_group_progress p = {.struct_size = sizeof p};
  for (;;) {
    /* submit while there is room */
    while (pass < passes && !cancelled) {
      filter_args a = {.k = stage ? CONTRAST : GAIN};
      tdm_task_desc d = {.codelet = stage == 0 ? &cl_brighten : stage == 1 ? &cl_contrast
                                                                           : &cl_present,
                         .handles = {strips[strip]}, .group = g};
      if (stage < 2) {
        d.args = &a;
        d.args_size = sizeof a;
      } else {
        d.flags = TDM_TASK_MAIN_THREAD;
      }
      if (submitted % 16 == 15) { /* wakes this loop as room comes back */
        d.callback = wake_up;
        d.flags |= TDM_TASK_CALLBACK_ON_DISPATCH;
      }
      st = tdm_submit_try(rt, &d);
      if (st == TDM_ERR_WOULD_BLOCK)
        break; /* back to the loop: completions make room */
      if (st) {
        fprintf(stderr, "\neditor: submit: %s\n", tdm_strerror(st));
        tdm_group_cancel(g);
        cancelled = 1;
        break;
      }
      submitted++;
      if (++stage == (pass + 1 == passes ? 3u : 2u)) {
        stage = 0;
        if (++strip == nstrips) {
          strip = 0;
          pass++;
        }
      }
    }
    tdm_group_get_progress(g, &p);
    if ((pass == passes || cancelled) && p.ended == p.submitted)
      break;
    struct pollfd fds[2] = {{.fd = fd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
    int timeout = cancel_after >= 0 && !cancelled
                      ? (int)(cancel_after - (now_ms() - t0) > 0 ? cancel_after - (now_ms() - t0) : 0)
                      : 100;
    int n = poll(fds, interactive ? 2 : 1, timeout);
    if (n < 0 && errno != EINTR) {
      perror("poll");
      break;
    }
    if (fds[0].revents & POLLIN)
      tdm_dispatch(rt);
    int key = interactive && (fds[1].revents & POLLIN);
    if (key) {
      char buf[64];
      if (read(0, buf, sizeof buf) <= 0)
        interactive = 0;
    }
    if (!cancelled && (key || (cancel_after >= 0 && now_ms() - t0 >= cancel_after))) {
      tdm_group_cancel(g);
      cancelled = 1;
    }
  }
  while (tdm_dispatch(rt) > 0) /* the last progress call */
    ;
  double ms = now_ms() - t0;
  tdm_group_get_progress(g, &p);
  printf("\neditor: %s in %.0f ms: %llu tasks ran, %llu cancelled, %u strips presented\n",
         cancelled ? "cancelled" : "done", ms,
         (unsigned long long)(p.ended - p.cancelled - p.failed),
         (unsigned long long)p.cancelled, presented);

  /* every strip back home; a strip whose newest version a cancelled task
   * was to write keeps the last one produced (TDM_ERR_LOST says so) */
  int bad = 0;
  for (size_t s = 0; s < nstrips; s++) {
    st = tdm_handle_unregister(strips[s]);
    if (st && st != TDM_ERR_LOST) {
      fprintf(stderr, "editor: strip %zu: %s\n", s, tdm_strerror(st));
      bad = 1;
    }
  }
  tdm_group_release(g);
  tdm_runtime_destroy(rt);

  /* the check: each strip at some stage of the pipeline (the last one
   * unless cancelled) */
  uint8_t *ref = malloc(STRIP_ROWS * row);
  for (size_t s = 0; ref && s < nstrips; s++) {
    size_t rows = s + 1 < nstrips ? STRIP_ROWS : im.h - s * STRIP_ROWS, n = rows * row;
    memcpy(ref, orig + s * STRIP_ROWS * row, n);
    unsigned stages = cancelled ? 0 : 2 * passes, k = 0;
    for (; k < stages; k++)
      for (size_t i = 0; i < n; i++)
        ref[i] = k % 2 ? contrast_px(ref[i], CONTRAST) : brighten_px(ref[i], GAIN);
    while (memcmp(ref, im.px + s * STRIP_ROWS * row, n) && cancelled && k < 2 * passes) {
      for (size_t i = 0; i < n; i++)
        ref[i] = k % 2 ? contrast_px(ref[i], CONTRAST) : brighten_px(ref[i], GAIN);
      k++;
    }
    if (memcmp(ref, im.px + s * STRIP_ROWS * row, n)) {
      fprintf(stderr, "editor: strip %zu is not what the pipeline makes\n", s);
      bad = 1;
      break;
    }
  }
  if (!ref)
    bad = 1;
  if (!bad && write_ppm(out, &im))
    bad = 1;
  if (!bad)
    printf("editor: %s written and checked\n", out);
  free(ref);
  free(orig);
  free(strips);
  tdm_free(im.px);
  return bad;
}
