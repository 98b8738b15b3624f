/*
 * Performance models per application: two applications that name a
 * codelet alike keep their timings apart (tdm_config.app, TANDEM_APP, the
 * program's name by default), and tandem-models lists, shows (as text and
 * JSON) and resets them.
 *
 *   test-models path/to/tandem-models
 */
#include "common.h"
#include "json.h"

#include <math.h>

#include "internal.h"
#include "sched/perfmodel.h"

static const char *tool;

static void touch(const tdm_buffer *b, const void *args, size_t n) {
  (void)args;
  (void)n;
  volatile const char *p = b[0].ptr;
  (void)p[0];
}

static const tdm_codelet blur = {
    .name = "blur", .cpu_fn = touch, .nbuffers = 1, .modes = {TDM_R}};

/* Runs 4 tasks of `blur` on a vector of `bytes` bytes in a runtime of app
 * `app` (NULL: the default) with its cache in dir; the models are saved
 * at destroy. An emulated device makes the policy keep models. The size
 * tells the applications' records apart (their times would only on an
 * idle machine). */
static void run_app(const char *dir, const char *app, size_t bytes) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.cache_dir = dir;
  cfg.app = app;
  cfg.nworkers = 1;
  cfg.sim = "gpu:speedup=1,memory=shared";
  tdm_runtime *rt = NULL;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  char *data = calloc(1, bytes);
  assert_non_null(data);
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, data, bytes, 1, &h), TDM_OK);
  for (int i = 0; i < 4; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &blur, .handles = {h}}), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  tdm_runtime_destroy(rt);
  free(data);
}

/* Whether the model file `file` in dir has a record of blur at `bytes`
 * on the CPU workers. */
static bool learnt(const char *dir, const char *file, uint64_t bytes) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  tdm_perfmodel *m = tdm__model_new();
  assert_non_null(m);
  bool found = false;
  if (tdm__model_load(m, AT_FDCWD, path, NULL) == TDM_OK)
    found = tdm__model_predict(m, "blur", bytes, "cpu", NULL) >= 0;
  tdm__model_free(m);
  return found;
}

static bool exists(const char *dir, const char *file) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  return access(path, F_OK) == 0;
}

static void test_models_per_application(void **state) {
  (void)state;
  char dir[64];
  test_temp_dir(dir, sizeof dir);
  unsetenv("TANDEM_APP");
  run_app(dir, "small", 64);
  run_app(dir, "large", 4096);
  /* each application its own records */
  assert_true(learnt(dir, "perfmodel-v1-small.txt", 64));
  assert_false(learnt(dir, "perfmodel-v1-small.txt", 4096));
  assert_true(learnt(dir, "perfmodel-v1-large.txt", 4096));
  assert_false(learnt(dir, "perfmodel-v1-large.txt", 64));
  /* the default: the program's name */
  run_app(dir, NULL, 128);
  assert_true(learnt(dir, "perfmodel-v1-test-models.txt", 128));
  /* the environment over the config; a name made a file name */
  setenv("TANDEM_APP", "my app/2", 1);
  run_app(dir, "small", 256);
  unsetenv("TANDEM_APP");
  assert_true(learnt(dir, "perfmodel-v1-my_app_2.txt", 256));
  assert_false(learnt(dir, "perfmodel-v1-small.txt", 256)); /* untouched */
  test_remove_dir(dir);
}

/* A model of app "demo": blur on the CPU taking 1 ns per byte at sizes
 * 1000 and 4000 (a law of exponent 1), scale on a GPU at one size with
 * one observation (calibrating). */
static void write_demo_model(const char *dir) {
  char path[256];
  snprintf(path, sizeof path, "%s/perfmodel-v1-demo.txt", dir);
  tdm_perfmodel *m = tdm__model_new();
  assert_non_null(m);
  for (int k = 0; k < 5; k++) {
    assert_true(tdm__model_observe(m, "blur", 1000, "cpu", 1e-6 * (k == 4 ? 3 : 1)));
    assert_true(tdm__model_observe(m, "blur", 4000, "cpu", 4e-6));
  }
  assert_true(tdm__model_observe(m, "scale", 64, "opencl:gpu", 2e-3));
  assert_int_equal(tdm__model_save(m, AT_FDCWD, path, NULL), TDM_OK);
  tdm__model_free(m);
}

static json *run_json(const char *args) {
  char *out;
  assert_int_equal(test_run(tool, args, &out), 0);
  json *doc = json_parse(out);
  if (!doc)
    fail_msg("not JSON: %s", out);
  free(out);
  return doc;
}

static void test_tool_show_and_list(void **state) {
  (void)state;
  char dir[64], args[256];
  test_temp_dir(dir, sizeof dir);
  write_demo_model(dir);
  run_app(dir, "other", 64);

  snprintf(args, sizeof args, "--cache-dir '%s' --json list", dir);
  json *doc = run_json(args);
  json *apps = json_get(doc, "applications");
  assert_true(apps && apps->type == JSON_ARRAY && apps->n == 2);
  json *demo = apps->items[0];
  assert_string_equal(json_get(demo, "app")->string, "demo");
  assert_true(json_get(demo, "codelets")->number == 2);
  assert_true(json_get(demo, "sizes")->number == 3);
  assert_true(json_get(demo, "observations")->number == 11);
  assert_string_equal(json_get(apps->items[1], "app")->string, "other");
  json_free(doc);

  snprintf(args, sizeof args, "--cache-dir '%s' --json show demo", dir);
  doc = run_json(args);
  json *codelets = json_get(doc, "codelets");
  assert_true(codelets && codelets->n == 2);
  json *b = codelets->items[0];
  assert_string_equal(json_get(b, "codelet")->string, "blur");
  json *cls = json_get(b, "classes")->items[0];
  assert_string_equal(json_get(cls, "class")->string, "cpu");
  json *sizes = json_get(cls, "sizes");
  assert_true(sizes->n == 2);
  assert_true(json_get(sizes->items[0], "bytes")->number == 1000);
  assert_true(json_get(sizes->items[0], "count")->number == 5);
  assert_true(fabs(json_get(sizes->items[0], "median_s")->number - 1e-6) < 1e-12);
  assert_true(fabs(json_get(sizes->items[0], "max_s")->number - 3e-6) < 1e-12);
  assert_true(json_get(sizes->items[0], "calibrated")->boolean);
  json *law = json_get(cls, "law");
  assert_true(law && law->type == JSON_OBJECT);
  assert_true(fabs(json_get(law, "exponent")->number - 1) < 1e-6);
  assert_true(fabs(json_get(law, "seconds_at_1_byte")->number - 1e-9) < 1e-12);
  json *s = codelets->items[1];
  assert_string_equal(json_get(s, "codelet")->string, "scale");
  cls = json_get(s, "classes")->items[0];
  assert_string_equal(json_get(cls, "class")->string, "opencl:gpu");
  assert_false(json_get(json_get(cls, "sizes")->items[0], "calibrated")->boolean);
  assert_true(json_get(cls, "law")->type == JSON_NULL);
  json_free(doc);

  /* the same as text */
  char *out;
  snprintf(args, sizeof args, "--cache-dir '%s' show demo blur", dir);
  assert_int_equal(test_run(tool, args, &out), 0);
  assert_non_null(strstr(out, "codelet blur"));
  assert_non_null(strstr(out, "law: time = 1e-09 s * bytes^1.000"));
  assert_null(strstr(out, "scale"));
  free(out);
  /* what is not there is said, with a failure status */
  snprintf(args, sizeof args, "--cache-dir '%s' show demo sharpen 2>&1", dir);
  assert_int_equal(test_run(tool, args, &out), 1);
  assert_non_null(strstr(out, "demo has no model of codelet sharpen"));
  free(out);
  snprintf(args, sizeof args, "--cache-dir '%s' show nobody 2>&1", dir);
  assert_int_equal(test_run(tool, args, &out), 1);
  assert_non_null(strstr(out, "no such file"));
  free(out);
  assert_int_equal(test_run(tool, "frobnicate 2>/dev/null", &out), 2);
  free(out);
  test_remove_dir(dir);
}

static void test_tool_reset(void **state) {
  (void)state;
  char dir[64], args[256], *out;
  test_temp_dir(dir, sizeof dir);
  write_demo_model(dir);
  snprintf(args, sizeof args, "--cache-dir '%s' reset demo blur", dir);
  assert_int_equal(test_run(tool, args, &out), 0);
  assert_non_null(strstr(out, "demo: 2 sizes forgotten of codelet blur"));
  free(out);
  char path[256];
  snprintf(path, sizeof path, "%s/perfmodel-v1-demo.txt", dir);
  tdm_perfmodel *m = tdm__model_new();
  assert_int_equal(tdm__model_load(m, AT_FDCWD, path, NULL), TDM_OK);
  assert_true(tdm__model_predict(m, "blur", 1000, "cpu", NULL) < 0);
  assert_true(tdm__model_predict(m, "scale", 64, "opencl:gpu", NULL) > 0);
  tdm__model_free(m);
  /* again: nothing left of it */
  assert_int_equal(test_run(tool, args, &out), 0);
  assert_non_null(strstr(out, "no model of codelet blur to reset"));
  free(out);
  /* the whole application: its file goes */
  snprintf(args, sizeof args, "--cache-dir '%s' reset demo", dir);
  assert_int_equal(test_run(tool, args, &out), 0);
  assert_non_null(strstr(out, "demo: 1 size forgotten"));
  free(out);
  assert_false(exists(dir, "perfmodel-v1-demo.txt"));
  snprintf(args, sizeof args, "--cache-dir '%s' list", dir);
  assert_int_equal(test_run(tool, args, &out), 0);
  assert_non_null(strstr(out, "no performance models in"));
  free(out);
  test_remove_dir(dir);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test-models path/to/tandem-models\n");
    return 2;
  }
  tool = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_models_per_application),
      cmocka_unit_test(test_tool_show_and_list),
      cmocka_unit_test(test_tool_reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
