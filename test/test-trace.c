/*
 * What ran where: the trace (valid JSON, every task exactly once on the
 * worker that ran it, flow arrows exactly the graph's edges, copies
 * matching the device counters), the statistics (tasks counted = tasks
 * submitted), the graph in DOT, and the SVG Gantt chart of tandem-trace
 * (well-formed XML, one bar per task).
 *
 *   test-trace path/to/tandem-trace
 */
#include "common.h"
#include "json.h"

#include <ctype.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *tool;
static char dir[64];

enum { CHAIN = 12, FAN = 6, NTASKS = CHAIN + 2 + FAN };

/* the worker that ran task i, as the task saw it */
static _Atomic int ran_on[NTASKS];
static tdm_runtime *the_rt;

static void record(const tdm_buffer *b, const void *args, size_t size) {
  (void)b;
  (void)size;
  int i = *(const int *)args;
  ran_on[i] = tdm_worker_id(the_rt);
  /* a little work, so that tasks have a length; the chain's 25 times as
   * much, so that it is the critical path by measured times even when a
   * task of the fan is preempted for a while (under TSan on a loaded
   * machine one took 1.9 ms, longer than the whole chain of equal tasks) */
  volatile double x = 0;
  for (int k = 0; k < (i < CHAIN ? 25 : 1) * 20000; k++)
    x += k;
}

static const tdm_codelet chain_cl = {
    .name = "chain", .cpu_fn = record, .nbuffers = 1, .modes = {TDM_RW}};
static const tdm_codelet node_cl = {.name = "node", .cpu_fn = record};

typedef struct edge {
  int pred, succ; /* submission numbers */
} edge;

/* Submits the graph: a chain of CHAIN tasks on one handle (each after the
 * one before), then by explicit dependencies a root, FAN tasks after it,
 * and a join after them all. Task i is the i-th submitted: trace id i+1. */
static unsigned submit_graph(tdm_runtime *rt, tdm_handle *h, edge *edges) {
  unsigned ne = 0;
  for (int i = 0; i < CHAIN; i++) {
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &chain_cl, .handles = {h},
                                                      .args = &i, .args_size = sizeof i}),
                     TDM_OK);
    if (i)
      edges[ne++] = (edge){i - 1, i};
  }
  tdm_task *root, *fan[FAN], *join;
  int n = CHAIN;
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &node_cl, .args = &n,
                                                        .args_size = sizeof n},
                                   &root),
                   TDM_OK);
  assert_int_equal(tdm_task_submit(root), TDM_OK);
  int root_no = n++;
  for (int k = 0; k < FAN; k++) {
    assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &node_cl, .args = &n,
                                                          .args_size = sizeof n},
                                     &fan[k]),
                     TDM_OK);
    assert_int_equal(tdm_task_depends_on(fan[k], root), TDM_OK);
    assert_int_equal(tdm_task_submit(fan[k]), TDM_OK);
    edges[ne++] = (edge){root_no, n++};
  }
  assert_int_equal(tdm_task_create(rt, &(tdm_task_desc){.codelet = &node_cl, .args = &n,
                                                        .args_size = sizeof n},
                                   &join),
                   TDM_OK);
  for (int k = 0; k < FAN; k++) {
    assert_int_equal(tdm_task_depends_on(join, fan[k]), TDM_OK);
    edges[ne++] = (edge){root_no + 1 + k, n};
  }
  assert_int_equal(tdm_task_submit(join), TDM_OK);
  assert_int_equal(n + 1, NTASKS);
  tdm_task_release(root);
  for (int k = 0; k < FAN; k++)
    tdm_task_release(fan[k]);
  tdm_task_release(join);
  return ne;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  rewind(f);
  char *s = malloc((size_t)n + 1);
  assert_non_null(s);
  assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = 0;
  fclose(f);
  return s;
}

static double num(const json *o, const char *k) {
  const json *v = json_get(o, k);
  if (!v || v->type != JSON_NUMBER)
    fail_msg("member %s missing or not a number", k);
  return v->number;
}

static const char *str(const json *o, const char *k) {
  const json *v = json_get(o, k);
  if (!v || v->type != JSON_STRING)
    fail_msg("member %s missing or not a string", k);
  return v->string;
}

/* ---- a tiny XML well-formedness check (for the SVG) ------------------------ */

/* Returns the number of <rect class="task"> elements, or -1 (and why) when
 * the document is not well-formed: one root, tags nested and closed,
 * attribute values quoted, entities known. */
static int xml_check(const char *p, char *why, size_t size, char **stack, size_t *depth_out);

static int xml_task_rects(const char *p, char *why, size_t size) {
  char *stack[64];
  size_t depth = 0;
  int n = xml_check(p, why, size, stack, &depth);
  while (depth)
    free(stack[--depth]);
  return n;
}

static int xml_check(const char *p, char *why, size_t size, char **stack, size_t *depth_out) {
  size_t depth = 0;
  int roots = 0, tasks = 0;
#define RETURN(v) return (*depth_out = depth, (v))
  if (!strncmp(p, "<?xml", 5)) {
    p = strstr(p, "?>");
    if (!p)
      RETURN((snprintf(why, size, "unclosed prolog"), -1));
    p += 2;
  }
  while (*p) {
    if (*p == '&') {
      static const char *const ents[] = {"&lt;", "&gt;", "&amp;", "&quot;", "&apos;"};
      size_t i;
      for (i = 0; i < 5 && strncmp(p, ents[i], strlen(ents[i])); i++)
        ;
      if (i == 5)
        RETURN((snprintf(why, size, "unknown entity at %.20s", p), -1));
      p += strlen(ents[i]);
      continue;
    }
    if (*p != '<') {
      if (!depth && !isspace((unsigned char)*p))
        RETURN((snprintf(why, size, "text outside the root"), -1));
      p++;
      continue;
    }
    if (p[1] == '/') { /* a closing tag */
      const char *name = p + 2;
      size_t len = strcspn(name, "> \t\n");
      if (!depth || strncmp(stack[depth - 1], name, len) || stack[depth - 1][len] != ' ')
        RETURN((snprintf(why, size, "mismatched closing tag %.20s", p), -1));
      free(stack[--depth]);
      p = strchr(p, '>');
      if (!p)
        RETURN((snprintf(why, size, "unclosed tag"), -1));
      p++;
      continue;
    }
    const char *name = p + 1;
    size_t len = strcspn(name, "/> \t\n");
    if (!len)
      RETURN((snprintf(why, size, "a tag without a name"), -1));
    bool is_rect = len == 4 && !strncmp(name, "rect", 4), task = false;
    p = name + len;
    for (;;) { /* attributes */
      while (isspace((unsigned char)*p))
        p++;
      if (*p == '>' || (p[0] == '/' && p[1] == '>'))
        break;
      size_t alen = strcspn(p, "= \t\n>");
      if (!alen || p[alen] != '=' || p[alen + 1] != '"')
        RETURN((snprintf(why, size, "bad attribute at %.20s", p), -1));
      const char *value = p + alen + 2, *end = strchr(value, '"');
      if (!end || memchr(value, '<', (size_t)(end - value)))
        RETURN((snprintf(why, size, "bad attribute value at %.20s", p), -1));
      if (is_rect && alen == 5 && !strncmp(p, "class", 5) && end - value == 4 &&
          !strncmp(value, "task", 4))
        task = true;
      p = end + 1;
    }
    tasks += task;
    if (!depth)
      roots++;
    if (*p == '/') {
      p += 2;
      continue;
    }
    if (depth == 64)
      RETURN((snprintf(why, size, "too deep"), -1));
    /* remember the name followed by a space, for the comparison above */
    char *copy = malloc(len + 2);
    memcpy(copy, name, len);
    copy[len] = ' ';
    copy[len + 1] = 0;
    stack[depth++] = copy;
    p++;
  }
  if (depth)
    RETURN((snprintf(why, size, "%zu unclosed elements", depth), -1));
  if (roots != 1)
    RETURN((snprintf(why, size, "%d root elements", roots), -1));
  RETURN(tasks);
#undef RETURN
}

/* ---- the tests ------------------------------------------------------------ */

/* Two unbound workers, tracing to `trace`, logging into *log. */
static tdm_config traced_config(const char *trace, test_log *log) {
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.nworkers = 2;
  cfg.bind_workers = 0;
  cfg.trace_path = trace;
  test_log_attach(&cfg, log);
  return cfg;
}

/* The trace at path, parsed (the test fails if it is not JSON), and its
 * event array in *events. */
static json *load_trace(const char *path, const json **events) {
  char *text = slurp(path);
  json *doc = json_parse(text);
  free(text);
  if (!doc)
    fail_msg("%s is not valid JSON", path);
  *events = json_get(doc, "traceEvents");
  if (!*events || (*events)->type != JSON_ARRAY)
    fail_msg("%s has no traceEvents array", path);
  return doc;
}

static void test_trace_dag_stats_svg(void **state) {
  (void)state;
  char trace[128], dot[128], svg[128], cmd[512];
  snprintf(trace, sizeof trace, "%s/trace.json", dir);
  snprintf(dot, sizeof dot, "%s/graph.dot", dir);
  snprintf(svg, sizeof svg, "%s/chart.svg", dir);
  test_log log;
  tdm_config cfg = traced_config(trace, &log);
  cfg.devices = "none";
  cfg.dag_path = dot;
  cfg.stats = 1;
  cfg.log_level = TDM_LOG_INFO;
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  the_rt = rt;
  long v = 0;
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, &v, 1, sizeof v, &h), TDM_OK);
  edge edges[64];
  unsigned ne = submit_graph(rt, h, edges);
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  assert_int_equal(tdm_trace_flush(rt), TDM_OK); /* on request, while running */

  /* statistics add up */
  uint64_t counted = 0;
  for (unsigned w = 0; w < tdm_runtime_nworkers(rt); w++) {
    tdm_worker_stats s = {.struct_size = sizeof s};
    assert_int_equal(tdm_runtime_worker_stats(rt, w, &s), TDM_OK);
    counted += s.tasks;
    assert_true(s.busy_ns > 0 || s.tasks == 0);
    assert_true(s.steals_won <= s.steals_tried);
  }
  assert_int_equal(counted, NTASKS);
  tdm_handle_unregister(h);
  tdm_runtime_destroy(rt);
  assert_true(test_log_has(&log, "stats: CPU worker 0:"));
  assert_true(test_log_has(&log, "stats: codelet chain on CPU workers: 12 tasks"));

  /* the trace: valid JSON, each task once, on the worker that ran it */
  const json *evs;
  json *doc = load_trace(trace, &evs);
  int seen[NTASKS] = {0};
  double start[NTASKS];
  int track[NTASKS];
  unsigned flows_s = 0, flows_f = 0;
  for (size_t i = 0; i < evs->n; i++) {
    const json *e = evs->items[i];
    const char *ph = str(e, "ph");
    if (!strcmp(ph, "X") && !strcmp(str(e, "cat"), "task")) {
      int id = (int)num(json_get(e, "args"), "id");
      assert_true(id >= 1 && id <= NTASKS);
      int k = id - 1;
      seen[k]++;
      track[k] = (int)num(e, "tid");
      start[k] = num(e, "ts");
      assert_int_equal(track[k], ran_on[k]);
      assert_string_equal(str(e, "name"), k < CHAIN ? "chain" : "node");
      assert_true(num(e, "dur") >= 0);
    }
    flows_s += !strcmp(ph, "s");
    flows_f += !strcmp(ph, "f");
  }
  for (int k = 0; k < NTASKS; k++)
    assert_int_equal(seen[k], 1);
  /* flows: each arrow from its predecessor's slice to its successor's,
   * exactly the graph's edges */
  assert_int_equal(flows_s, ne);
  assert_int_equal(flows_f, ne);
  bool found[64] = {false};
  for (size_t i = 0; i < evs->n; i++) {
    const json *s = evs->items[i];
    if (strcmp(str(s, "ph"), "s"))
      continue;
    const json *f = NULL;
    for (size_t j = 0; j < evs->n && !f; j++)
      if (!strcmp(str(evs->items[j], "ph"), "f") &&
          num(evs->items[j], "id") == num(s, "id"))
        f = evs->items[j];
    assert_non_null(f);
    int pred = -1, succ = -1;
    for (int k = 0; k < NTASKS; k++) {
      if (track[k] == (int)num(s, "tid") && start[k] == num(s, "ts"))
        pred = k;
      if (track[k] == (int)num(f, "tid") && start[k] == num(f, "ts"))
        succ = k;
    }
    unsigned e;
    for (e = 0; e < ne && !(edges[e].pred == pred && edges[e].succ == succ); e++)
      ;
    if (e == ne)
      fail_msg("a flow %d -> %d that is not an edge of the graph", pred, succ);
    assert_false(found[e]);
    found[e] = true;
  }
  json_free(doc);

  /* the graph: every task a node, every edge an arrow */
  char *graph = slurp(dot);
  assert_non_null(strstr(graph, "digraph tandem"));
  for (int k = 0; k < NTASKS; k++) {
    char node[32];
    snprintf(node, sizeof node, "  t%d [label=", k + 1);
    assert_non_null(strstr(graph, node));
  }
  for (unsigned e = 0; e < ne; e++) {
    char arrow[32];
    snprintf(arrow, sizeof arrow, "  t%d -> t%d;", edges[e].pred + 1, edges[e].succ + 1);
    assert_non_null(strstr(graph, arrow));
  }
  assert_non_null(strstr(graph, "fillcolor=lightblue")); /* ran on CPU workers */
  free(graph);

  /* the chart: well-formed XML, one bar per task */
  snprintf(cmd, sizeof cmd, "'%s' '%s' -o '%s'", tool, trace, svg);
  assert_int_equal(system(cmd), 0);
  char *chart = slurp(svg);
  char why[128] = "";
  int bars = xml_task_rects(chart, why, sizeof why);
  if (bars < 0)
    fail_msg("the SVG is not well-formed: %s", why);
  assert_int_equal(bars, NTASKS);
  free(chart);

  /* the summary: every worker, each codelet with its count, and the
   * critical path, the chain (12 long tasks against 3 short ones for the
   * fan) */
  char *sum;
  snprintf(cmd, sizeof cmd, "'%s' --summary", trace);
  assert_int_equal(test_run(tool, cmd, &sum), 0);
  assert_non_null(strstr(sum, "20 tasks, makespan"));
  assert_non_null(strstr(sum, "CPU worker 0 (CPUs"));
  assert_non_null(strstr(sum, "CPU worker 1 (CPUs"));
  printf("%s", sum);
  assert_non_null(strstr(sum, "chain   CPU workers      12"));
  assert_non_null(strstr(sum, "node    CPU workers       8"));
  if (!strstr(sum, "critical path: 12 tasks"))
    fail_msg("summary: %s", sum);
  free(sum);
  unlink(trace);
  unlink(dot);
  unlink(svg);
}

/* A task of the stencil below: spins for args[1] microseconds. */
static void spin_us(const tdm_buffer *b, const void *args, size_t size) {
  (void)b;
  (void)size;
  double until = now_s() + 1e-6 * ((const int *)args)[1];
  while (now_s() < until)
    ;
}

static const tdm_codelet stencil_cl = {.name = "stencil",
                                       .cpu_fn = spin_us,
                                       .nbuffers = 3,
                                       .modes = {TDM_RW, TDM_RW, TDM_R}};

/* The graph of run `seed`: 60 tasks over 4 handles, task i writing
 * handles i and i+1 and reading i+2 (mod 4), so that most predecessors
 * come through two handles; their lengths random, so that a
 * predecessor is running for one handle and finished for the next in
 * some runs and not others. The DOT it writes (malloc'd). */
static char *stencil_dag(unsigned seed) {
  char dot[128];
  snprintf(dot, sizeof dot, "%s/stencil.dot", dir);
  tdm_config cfg;
  tdm_config_init(&cfg);
  cfg.ignore_env = 1;
  cfg.devices = "none";
  cfg.nworkers = 2;
  cfg.dag_path = dot;
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  long v[4] = {0};
  tdm_handle *h[4];
  for (int k = 0; k < 4; k++)
    assert_int_equal(tdm_register_vector(rt, &v[k], 1, sizeof v[k], &h[k]), TDM_OK);
  srand(seed);
  for (int i = 0; i < 60; i++) {
    int args[2] = {i, rand() % 300};
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &stencil_cl,
                                                      .handles = {h[i % 4], h[(i + 1) % 4],
                                                                  h[(i + 2) % 4]},
                                                      .args = args,
                                                      .args_size = sizeof args}),
                     TDM_OK);
    if (rand() % 4 == 0) /* now and then, the predecessors all finish first */
      usleep(200);
  }
  assert_int_equal(tdm_wait_all(rt), TDM_OK);
  tdm_runtime_destroy(rt);
  char *graph = slurp(dot);
  unlink(dot);
  return graph;
}

/* TANDEM_DAG writes every dependency edge once, the same file for every
 * run of the same program, however its tasks' timings fell. */
static void test_dag_same_every_run(void **state) {
  (void)state;
  char *first = stencil_dag(1);
  unsigned edges = 0;
  for (const char *p = first; (p = strstr(p, " -> ")); p++)
    edges++;
  /* each task after the one before (through two handles), the two before
   * it (a handle it writes, the other read) and so on: at least 59 */
  assert_true(edges >= 59);
  for (const char *line = first; (line = strstr(line, " -> ")); line++) {
    const char *start = line, *end = strchr(line, '\n');
    while (start > first && start[-1] != '\n')
      start--;
    char arrow[64];
    snprintf(arrow, sizeof arrow, "%.*s", (int)(end - start + 1), start);
    if (strstr(end, arrow))
      fail_msg("an edge written twice: %s", arrow);
  }
  for (unsigned seed = 2; seed <= 12; seed++) {
    char *again = stencil_dag(seed);
    if (strcmp(first, again))
      fail_msg("run %u wrote another graph", seed);
    free(again);
  }
  printf("the same %u edges in 12 runs\n", edges);
  free(first);
}

/* The chart gives long row labels and legend entries the room they need:
 * a right-aligned row label starts right of the chart's edge, legend
 * entries on one line do not run into each other, and the chart is wide
 * enough for both (at 6 px a character, less than sans-serif at 12 px
 * takes on average). */
static void test_svg_labels_fit(void **state) {
  (void)state;
  char trace[128], svg[128], cmd[512];
  snprintf(trace, sizeof trace, "%s/long.json", dir);
  snprintf(svg, sizeof svg, "%s/long.svg", dir);
  const char *row = "device 0: Some Vendor Graphics Accelerator With A Very Long Marketing Name "
                    "(Rev 7, 96 Compute Units)";
  FILE *f = fopen(trace, "w");
  assert_non_null(f);
  fprintf(f, "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":0,"
             "\"args\":{\"name\":\"%s\"}}", row);
  for (int c = 0; c < 6; c++)
    fprintf(f, ",{\"ph\":\"X\",\"cat\":\"task\",\"name\":\"codelet_%d_with_a_rather_long_descriptive_name\","
               "\"pid\":1,\"tid\":0,\"ts\":%d,\"dur\":5,\"args\":{\"id\":%d}}",
            c, 10 * c, c + 1);
  fprintf(f, "]}\n");
  fclose(f);
  snprintf(cmd, sizeof cmd, "'%s' '%s' -o '%s'", tool, trace, svg);
  assert_int_equal(system(cmd), 0);
  char *chart = slurp(svg);
  int width = 0;
  assert_int_equal(sscanf(strstr(chart, "<svg "), "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\"",
                          &width), 1);
  /* the row label */
  char want[256];
  snprintf(want, sizeof want, "text-anchor=\"end\">%s</text>", row);
  const char *label = strstr(chart, want);
  assert_non_null(label);
  const char *open = label;
  while (open > chart && strncmp(open, "<text x=\"", 9))
    open--;
  int x = atoi(open + 9);
  if (x < 6 * (int)strlen(row))
    fail_msg("the row label ends at x=%d: %zu characters do not fit", x, strlen(row));
  /* the legend: entries on a line keep apart, and within the chart */
  const char *p = strstr(chart, ">Legend</text>");
  assert_non_null(p);
  int prev_x = -1, prev_y = -1, prev_len = 0, entries = 0;
  while ((p = strstr(p, "<text x=\""))) {
    int ex, ey;
    assert_int_equal(sscanf(p, "<text x=\"%d\" y=\"%d\">", &ex, &ey), 2);
    const char *text = strchr(p, '>') + 1;
    int len = (int)(strchr(text, '<') - text);
    if (ey == prev_y && ex - prev_x < 6 * prev_len)
      fail_msg("legend entries overlap: x=%d after x=%d (%d characters)", ex, prev_x, prev_len);
    if (ex + 6 * len > width)
      fail_msg("a legend entry runs past the chart's width %d", width);
    prev_x = ex;
    prev_y = ey;
    prev_len = len;
    entries++;
    p = text;
  }
  assert_int_equal(entries, 6 + 3);
  free(chart);
  unlink(trace);
  unlink(svg);
}

#ifdef TDM_TEST_OPENCL
#include "tandem/opencl.h"

static const tdm_opencl_variant saxpy_cl = {
    .source = "__kernel void inc(__global const float *x, ulong nx,\n"
              "                  __global float *y, ulong ny) {\n"
              "  size_t i = get_global_id(0);\n"
              "  y[i] += x[i];\n"
              "}\n",
    .kernel = "inc"};
static const tdm_codelet trace_saxpy = {
    .name = "inc", .nbuffers = 2, .modes = {TDM_R, TDM_RW}, .opencl = &saxpy_cl};

/* Tasks on a device (PoCL as a discrete GPU) are in the trace on the
 * device's track, and its copies add up to the device counters. */
static void test_device_trace(void **state) {
  (void)state;
  char trace[128];
  snprintf(trace, sizeof trace, "%s/device.json", dir);
  test_log log;
  tdm_config cfg = traced_config(trace, &log);
  cfg.opencl_cpu_devices = 1;
  cfg.device_memory = TDM_MEMORY_SEPARATE;
  cfg.cache_dir = dir;
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  tdm_machine_info mi = {.struct_size = sizeof mi};
  assert_int_equal(tdm_runtime_machine(rt, &mi), TDM_OK);
  if (mi.device_workers == 0) {
    tdm_runtime_destroy(rt);
    skip(); /* no OpenCL CPU device here */
  }
  enum { N = 1 << 14, T = 10 };
  float *x = tdm_malloc(N * sizeof *x), *y = tdm_malloc(N * sizeof *y);
  for (int i = 0; i < N; i++)
    x[i] = y[i] = 1;
  tdm_handle *hx, *hy;
  assert_int_equal(tdm_register_vector(rt, x, N, sizeof(float), &hx), TDM_OK);
  assert_int_equal(tdm_register_vector(rt, y, N, sizeof(float), &hy), TDM_OK);
  for (int t = 0; t < T; t++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &trace_saxpy,
                                                      .handles = {hx, hy}}),
                     TDM_OK);
  assert_int_equal(tdm_handle_unregister(hy), TDM_OK);
  assert_int_equal(tdm_handle_unregister(hx), TDM_OK);
  unsigned dev = 0;
  assert_int_equal(test_used_devices(rt, &dev, 1), 1);
  tdm_device_counters c = test_counters(rt, dev);
  tdm_worker_stats s = {.struct_size = sizeof s};
  assert_int_equal(tdm_runtime_worker_stats(rt, mi.cpu_workers, &s), TDM_OK);
  assert_int_equal(s.tasks, T);
  assert_true(s.busy_ns > 0);
  tdm_runtime_destroy(rt);
  assert_true(y[0] == 1.0f + T && y[N - 1] == 1.0f + T);
  tdm_free(x);
  tdm_free(y);

  const json *evs;
  json *doc = load_trace(trace, &evs);
  uint64_t to_dev = 0, to_host = 0;
  unsigned on_device = 0;
  for (size_t i = 0; i < evs->n; i++) {
    const json *e = evs->items[i];
    if (strcmp(str(e, "ph"), "X"))
      continue;
    const char *cat = str(e, "cat");
    if (!strcmp(cat, "task")) {
      assert_int_equal((unsigned)num(e, "tid"), mi.cpu_workers); /* the device's track */
      on_device++;
    } else if (!strcmp(cat, "transfer")) {
      uint64_t b = (uint64_t)num(json_get(e, "args"), "bytes");
      if (!strcmp(str(e, "name"), "copy to device"))
        to_dev += b;
      else
        to_host += b;
    }
  }
  assert_int_equal(on_device, T);
  assert_int_equal(to_dev, c.bytes_to_device);
  assert_int_equal(to_host, c.bytes_to_host);
  assert_true(to_dev > 0 && to_host > 0);
  json_free(doc);
  unlink(trace);
}
#else
static void test_device_trace(void **state) {
  (void)state;
  skip(); /* built without the OpenCL headers */
}
#endif

/* ---- the application's side ----------------------------------------------- */

static _Atomic int hold;
static void held(const tdm_buffer *b, const void *args, size_t size) {
  (void)b;
  (void)args;
  (void)size;
  while (atomic_load(&hold))
    sleep_ms(1);
}

/* Tasks pinned to the application's thread on a track of their own,
 * pause, resume and a group's cancel as instant events there, and a
 * worker asleep when the trace is written shows its sleep so far: in
 * the trace and in tandem-trace --summary. */
static void test_application_side(void **state) {
  (void)state;
  char trace[128], cmd[512];
  snprintf(trace, sizeof trace, "%s/app.json", dir);
  test_log log;
  tdm_config cfg = traced_config(trace, &log);
  cfg.devices = "none";
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  static const tdm_codelet cl = {.name = "step", .cpu_fn = held};
  static const tdm_codelet cl_held = {.name = "held", .cpu_fn = held};
  tdm_group *g;
  assert_int_equal(tdm_group_create(rt, &(tdm_group_desc){.name = "edits"}, &g), TDM_OK);
  for (int i = 0; i < 10; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl, .group = g,
                                                     .flags = i % 3 ? 0 : TDM_TASK_MAIN_THREAD}),
                     TDM_OK);
  assert_int_equal(tdm_wait_all(rt), TDM_OK); /* dispatches the 4 pinned ones here */
  assert_int_equal(tdm_runtime_pause(rt), TDM_OK);
  sleep_ms(20);
  assert_int_equal(tdm_runtime_resume(rt), TDM_OK);
  atomic_store(&hold, 1);
  for (int i = 0; i < 5; i++)
    assert_int_equal(tdm_submit(rt, &(tdm_task_desc){.codelet = &cl_held, .group = g}), TDM_OK);
  assert_int_equal(tdm_group_cancel(g), TDM_OK);
  atomic_store(&hold, 0);
  assert_int_equal(tdm_group_wait(g), TDM_ERR_CANCELLED);
  sleep_ms(40); /* the workers park */
  assert_int_equal(tdm_trace_flush(rt), TDM_OK);
  tdm_group_release(g);

  const json *evs;
  json *doc = load_trace(trace, &evs);
  double app = -1;
  for (size_t i = 0; i < evs->n; i++) {
    const json *e = evs->items[i];
    if (!strcmp(str(e, "ph"), "M") && !strcmp(str(e, "name"), "thread_name") &&
        strstr(str(json_get(e, "args"), "name"), "application's thread"))
      app = num(e, "tid");
  }
  assert_true(app >= 0);
  unsigned on_app = 0, pauses = 0, resumes = 0, cancels = 0;
  double parked_until[2] = {0, 0}, pause_ts = 0, resume_ts = 0, cancel_ts = 0;
  for (size_t i = 0; i < evs->n; i++) {
    const json *e = evs->items[i];
    const char *ph = str(e, "ph");
    if (!strcmp(ph, "X") && !strcmp(str(e, "cat"), "task") && num(e, "tid") == app)
      on_app++;
    if (!strcmp(ph, "X") && !strcmp(str(e, "name"), "parked") && num(e, "tid") < 2) {
      double end = num(e, "ts") + num(e, "dur");
      int w = (int)num(e, "tid");
      if (end > parked_until[w])
        parked_until[w] = end;
    }
    if (!strcmp(ph, "i")) {
      assert_true(num(e, "tid") == app);
      assert_string_equal(str(e, "cat"), "application");
      const char *name = str(e, "name");
      if (!strcmp(name, "pause")) {
        pauses++;
        pause_ts = num(e, "ts");
      } else if (!strcmp(name, "resume")) {
        resumes++;
        resume_ts = num(e, "ts");
      } else {
        assert_string_equal(name, "cancel");
        assert_string_equal(str(json_get(e, "args"), "group"), "edits");
        if (num(json_get(e, "args"), "not_ended") != 5) /* the held ones */
          fail_msg("cancel with %g tasks not ended, not 5", num(json_get(e, "args"), "not_ended"));
        cancel_ts = num(e, "ts");
        cancels++;
      }
    }
  }
  json_free(doc);
  assert_int_equal(on_app, 4);
  assert_int_equal(pauses, 1);
  assert_int_equal(resumes, 1);
  assert_int_equal(cancels, 1);
  assert_true(resume_ts - pause_ts >= 19000); /* us */
  /* the workers went to sleep after the cancel and slept until the
   * flush, 40 ms later: that sleep, still going on, is in the trace */
  for (int w = 0; w < 2; w++)
    if (parked_until[w] < cancel_ts + 35000)
      fail_msg("worker %d: parked until %.0f us in the trace, the cancel at %.0f us", w,
               parked_until[w], cancel_ts);

  char *sum;
  snprintf(cmd, sizeof cmd, "'%s' --summary", trace);
  assert_int_equal(test_run(tool, cmd, &sum), 0);
  printf("%s", sum);
  assert_non_null(strstr(sum, "the application's thread (tdm_dispatch)       4"));
  assert_non_null(strstr(sum, "application: 1 pause (paused"));
  assert_non_null(strstr(sum, "1 cancel: group edits at"));
  free(sum);
  tdm_runtime_destroy(rt);
}

static void test_flush_without_trace(void **state) {
  (void)state;
  test_log log;
  tdm_runtime *rt = test_runtime(1, &log);
  assert_int_equal(tdm_trace_flush(rt), TDM_ERR_INVALID_ARG);
  assert_true(test_log_has(&log, "no trace was asked for"));
  assert_int_equal(tdm_trace_flush(NULL), TDM_ERR_INVALID_ARG);
  tdm_worker_stats s = {.struct_size = sizeof s};
  assert_int_equal(tdm_runtime_worker_stats(rt, 5, &s), TDM_ERR_INVALID_ARG);
  tdm_runtime_destroy(rt);
}

/* A data-parallel operation's chunks in the trace and the summary: each
 * chunk's event has its rows and elements, and tandem-trace --summary
 * gives the elements each class covered and its share (the CPU workers
 * alone here: all of them, 100%). */
static void fill_rows(const tdm_buffer *b, const tdm_range *r, const void *args, size_t size) {
  (void)args, (void)size;
  for (size_t i = r->begin[0]; i < r->end[0]; i++)
    ((float *)b[0].ptr)[i - r->begin[0]] = (float)i;
}

static void test_operation_shares(void **state) {
  (void)state;
  char trace[96];
  snprintf(trace, sizeof trace, "%s/op.json", dir);
  test_log log;
  tdm_config cfg = traced_config(trace, &log);
  cfg.devices = "none";
  tdm_runtime *rt;
  assert_int_equal(tdm_runtime_create(&cfg, &rt), TDM_OK);
  static float v[9973];
  tdm_handle *h;
  assert_int_equal(tdm_register_vector(rt, v, 9973, sizeof *v, &h), TDM_OK);
  static const tdm_codelet fill = {.name = "fill", .nbuffers = 1, .modes = {TDM_W}};
  tdm_parallel_desc d = {.codelet = &fill, .cpu_fn = fill_rows, .range = {9973},
                         .handles = {h}, .split_mask = 1, .grain = 100};
  assert_int_equal(tdm_parallel_submit(rt, &d, NULL), TDM_OK);
  assert_int_equal(tdm_handle_unregister(h), TDM_OK);
  assert_int_equal(tdm_runtime_destroy(rt), TDM_OK);
  assert_true(v[9972] == 9972.0f);
  char *text = slurp(trace);
  assert_non_null(strstr(text, "\"rows\":[0,"));
  assert_non_null(strstr(text, ",9973],\"elements\":"));
  free(text);
  char cmd[256], *sum;
  snprintf(cmd, sizeof cmd, "'%s' --summary", trace);
  assert_int_equal(test_run(tool, cmd, &sum), 0);
  printf("%s", sum);
  assert_non_null(strstr(sum, "elements  share"));
  const char *row = strstr(sum, "\nfill ");
  assert_non_null(row);
  assert_non_null(strstr(row, "9973 100.0%"));
  free(sum);
  unlink(trace);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test-trace path/to/tandem-trace\n");
    return 2;
  }
  tool = argv[1];
  snprintf(dir, sizeof dir, "/tmp/tandem-trace-XXXXXX");
  if (!mkdtemp(dir))
    return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_dag_stats_svg),
      cmocka_unit_test(test_dag_same_every_run),
      cmocka_unit_test(test_svg_labels_fit),
      cmocka_unit_test(test_device_trace),
      cmocka_unit_test(test_flush_without_trace),
      cmocka_unit_test(test_application_side),
      cmocka_unit_test(test_operation_shares),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    rc = 1;
  return rc;
}
