/*
 * demo: a small image-processing pipeline on Tandem.
 *
 * A 2048 x 2048 image is cut into tiles. Each tile is blurred into a
 * second image (reading its own tile and the same tile of the source),
 * then brightened in place; a last stage sums every tile into a histogram
 * bucket per tile row. The dependencies come from the access modes alone.
 * The demo checks the result against a sequential run and prints how the
 * tasks spread over the workers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tandem.h>

#define N 2048
#define TILE 256
#define NT (N / TILE)

static _Atomic unsigned ran_on[256];

static void count_worker(const void *args) {
  const tdm_runtime *rt = *(tdm_runtime *const *)args;
  int w = tdm_worker_id(rt);
  if (w >= 0 && w < 256)
    ran_on[w]++;
}

/* buffers: source tile (R), destination tile (W) */
static void blur(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  const float *s = b[0].ptr;
  float *d = b[1].ptr;
  for (size_t r = 0; r < b[0].nx; r++)
    for (size_t c = 0; c < b[0].ny; c++) {
      float acc = 0;
      int n = 0;
      for (int dr = -1; dr <= 1; dr++)
        for (int dc = -1; dc <= 1; dc++) {
          long rr = (long)r + dr, cc = (long)c + dc;
          if (rr < 0 || cc < 0 || rr >= (long)b[0].nx || cc >= (long)b[0].ny)
            continue;
          acc += s[rr * (long)b[0].ld + cc];
          n++;
        }
      d[r * b[1].ld + c] = acc / (float)n;
    }
  count_worker(args);
}

static void brighten(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  float *d = b[0].ptr;
  for (size_t r = 0; r < b[0].nx; r++)
    for (size_t c = 0; c < b[0].ny; c++)
      d[r * b[0].ld + c] = d[r * b[0].ld + c] * 1.5f + 0.25f;
  count_worker(args);
}

/* buffers: tile (R), row sums (RW) */
static void sum_tile(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  const float *d = b[0].ptr;
  double *acc = b[1].ptr;
  for (size_t r = 0; r < b[0].nx; r++)
    for (size_t c = 0; c < b[0].ny; c++)
      *acc += d[r * b[0].ld + c];
  count_worker(args);
}

static void reference(const float *src, float *dst, double *sums) {
  for (int ti = 0; ti < NT; ti++)
    for (int tj = 0; tj < NT; tj++) {
      tdm_buffer s = {(void *)(src + ti * TILE * N + tj * TILE), sizeof(float), TILE, TILE, N};
      tdm_buffer d = {dst + ti * TILE * N + tj * TILE, sizeof(float), TILE, TILE, N};
      tdm_buffer bd[2] = {s, d};
      tdm_runtime *none = NULL;
      blur(bd, &none, 0);
      brighten(&bd[1], &none, 0);
      tdm_buffer bs[2] = {d, {&sums[ti], sizeof(double), 1, 1, 1}};
      sum_tile(bs, &none, 0);
    }
}

int main(void) {
  float *src = malloc(sizeof(float) * N * N), *dst = malloc(sizeof(float) * N * N);
  float *ref = malloc(sizeof(float) * N * N);
  double sums[NT] = {0}, ref_sums[NT] = {0};
  if (!src || !dst || !ref)
    return 1;
  for (size_t i = 0; i < (size_t)N * N; i++)
    src[i] = (float)((i * 7919) % 256) / 255.0f;

  tdm_runtime *rt;
  tdm_status st = tdm_runtime_create(NULL, &rt);
  if (st) {
    fprintf(stderr, "tdm_runtime_create: %s\n", tdm_strerror(st));
    return 1;
  }
  tdm_handle *hs, *hd, *hsum[NT];
  tdm_register_matrix(rt, src, N, N, N, sizeof(float), &hs);
  tdm_register_matrix(rt, dst, N, N, N, sizeof(float), &hd);
  tdm_matrix_partition(hs, TILE, TILE, 0);
  tdm_matrix_partition(hd, TILE, TILE, 0);
  for (int i = 0; i < NT; i++)
    tdm_register_vector(rt, &sums[i], 1, sizeof(double), &hsum[i]);

  static const tdm_codelet cl_blur = {.name = "blur", .cpu_fn = blur,
                                      .nbuffers = 2, .modes = {TDM_R, TDM_W}};
  static const tdm_codelet cl_bright = {.name = "brighten", .cpu_fn = brighten,
                                        .nbuffers = 1, .modes = {TDM_RW}};
  static const tdm_codelet cl_sum = {.name = "sum", .cpu_fn = sum_tile,
                                     .nbuffers = 2, .modes = {TDM_R, TDM_RW}};
  unsigned ntasks = 0;
  for (int i = 0; i < NT; i++)
    for (int j = 0; j < NT; j++) {
      tdm_handle *s = tdm_matrix_tile(hs, i, j), *d = tdm_matrix_tile(hd, i, j);
      tdm_task_desc blur_t = {.codelet = &cl_blur, .handles = {s, d}, .args = &rt, .args_size = sizeof rt};
      tdm_task_desc bright_t = {.codelet = &cl_bright, .handles = {d}, .args = &rt, .args_size = sizeof rt};
      tdm_task_desc sum_t = {.codelet = &cl_sum, .handles = {d, hsum[i]}, .args = &rt, .args_size = sizeof rt};
      if ((st = tdm_submit(rt, &blur_t)) || (st = tdm_submit(rt, &bright_t)) ||
          (st = tdm_submit(rt, &sum_t))) {
        fprintf(stderr, "tdm_submit: %s\n", tdm_strerror(st));
        return 1;
      }
      ntasks += 3;
    }
  tdm_wait_all(rt);
  tdm_matrix_unpartition(hs, 0);
  tdm_matrix_unpartition(hd, 0);
  tdm_handle_unregister(hs);
  tdm_handle_unregister(hd);
  for (int i = 0; i < NT; i++)
    tdm_handle_unregister(hsum[i]);

  unsigned nw = tdm_runtime_nworkers(rt);
  tdm_runtime_destroy(rt);

  reference(src, ref, ref_sums);
  int ok = memcmp(ref, dst, sizeof(float) * N * N) == 0;
  for (int i = 0; i < NT; i++)
    ok = ok && ref_sums[i] == sums[i];
  printf("Tandem demo: %u tasks (blur, brighten, sum over %dx%d tiles) on %u workers\n",
         ntasks, NT, NT, nw);
  for (unsigned w = 0; w < nw && w < 256; w++)
    printf("  worker %u ran %u tasks\n", w, (unsigned)ran_on[w]);
  printf("result %s the sequential reference\n", ok ? "matches" : "DIFFERS FROM");
  free(src);
  free(dst);
  free(ref);
  return ok ? 0 : 1;
}
