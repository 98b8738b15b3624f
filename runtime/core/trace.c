/*
 * Recording what ran where and when (see trace.h), and writing it out:
 *
 *  - the trace, in the Chrome trace-event format (a JSON object whose
 *    "traceEvents" Perfetto and chrome://tracing read): one track per CPU
 *    worker and per device, one per copy direction of each device's link;
 *    tasks and copies as complete ("X") events, idle and parked periods
 *    too, dependencies as flow events ("s" at the predecessor, "f" bound
 *    to the successor);
 *  - the submitted graph as Graphviz DOT;
 *  - the statistics summary, through the log.
 *
 * Events go to a per-worker buffer (a lock that only a flush contends
 * for) or, from other threads, to a shared one; nothing is written until
 * the runtime is destroyed or tdm_trace_flush is called.
 */
#include "core.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void buf_lock(tdm_trace_buf *b) {
  while (atomic_exchange_explicit(&b->lock, 1, memory_order_acquire))
    tdm__cpu_relax();
}

static void buf_unlock(tdm_trace_buf *b) {
  atomic_store_explicit(&b->lock, 0, memory_order_release);
}

static void buf_add(const tdm_runtime *rt, tdm_trace_buf *b, const tdm_trace_event *e) {
  buf_lock(b);
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 1024;
    tdm_trace_event *ev = realloc(b->ev, cap * sizeof *ev);
    if (!ev) {
      buf_unlock(b);
      tdm__log(rt, TDM_LOG_WARNING, "trace: out of memory, an event is lost");
      return;
    }
    b->ev = ev;
    b->cap = cap;
  }
  b->ev[b->n++] = *e;
  buf_unlock(b);
}

void tdm__trace_add(tdm_runtime *rt, const tdm_trace_event *e) {
  tdm_worker *w = tdm__self_in(rt);
  buf_add(rt, w ? &w->trace : &rt->trace_shared, e);
}

void tdm__trace_task(tdm_runtime *rt, const tdm_task *t, unsigned worker, uint64_t t0,
                     uint64_t t1) {
  if (!rt->recording || !t->trace_id)
    return;
  tdm_trace_event e = {.kind = TDM_EV_TASK,
                       .track = (uint16_t)worker,
                       .id = t->trace_id,
                       .t0 = t0,
                       .t1 = t1,
                       .bytes = tdm__task_bytes(t),
                       .name = t->codelet->name};
  if (t->chunk) { /* its rows and elements */
    tdm_chunk_tail c = tdm__chunk_tail(t);
    e.lo = c.range.begin[0];
    e.hi = c.range.end[0];
    e.id2 = tdm__chunk_elements(t);
  }
  tdm__trace_add(rt, &e);
}

void tdm__trace_mark(tdm_runtime *rt, uint8_t kind, const char *name, uint64_t count) {
  if (!rt->cfg.trace_path)
    return;
  tdm_trace_marks *m = &rt->trace_marks;
  tdm_trace_mark mk = {.kind = kind, .t = tdm__now_ns(), .count = count};
  snprintf(mk.name, sizeof mk.name, "%s", name ? name : "");
  tdm__spin_lock(&m->lock);
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 16;
    tdm_trace_mark *v = realloc(m->v, cap * sizeof *v);
    if (v) {
      m->v = v;
      m->cap = cap;
    }
  }
  bool kept = m->n < m->cap;
  if (kept)
    m->v[m->n++] = mk;
  tdm__spin_unlock(&m->lock);
  if (!kept)
    tdm__log(rt, TDM_LOG_WARNING, "trace: out of memory, a mark is lost");
}

/* ---- gathering ------------------------------------------------------------ */

typedef struct all_events {
  tdm_trace_event *ev;
  size_t n, cap;
  bool failed;
} all_events;

static void gather_one(void *data, const tdm_trace_event *e) {
  all_events *a = data;
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 4096;
    tdm_trace_event *ev = realloc(a->ev, cap * sizeof *ev);
    if (!ev) {
      a->failed = true;
      return;
    }
    a->ev = ev;
    a->cap = cap;
  }
  a->ev[a->n++] = *e;
}

static void gather_buf(all_events *a, tdm_trace_buf *b) {
  buf_lock(b);
  for (size_t i = 0; i < b->n; i++)
    gather_one(a, &b->ev[i]);
  buf_unlock(b);
}

static bool gather(tdm_runtime *rt, all_events *a) {
  memset(a, 0, sizeof *a);
  uint64_t now = tdm__now_ns();
  for (unsigned w = 0; w < rt->nworkers; w++) {
    gather_buf(a, &rt->workers[w].trace);
    /* asleep now: its sleep so far (the whole one is recorded when it
     * wakes up, for a later write) */
    uint64_t from = atomic_load_explicit(&rt->workers[w].asleep_from, memory_order_relaxed);
    if (from && rt->cfg.trace_path)
      gather_one(a, &(tdm_trace_event){.kind = TDM_EV_PARKED, .track = (uint16_t)w, .t0 = from,
                                       .t1 = now});
  }
  gather_buf(a, &rt->trace_shared);
  for (unsigned i = 0; i < rt->nattached; i++)
    if (rt->attached[i].n && rt->attached[i].ops->trace_collect)
      rt->attached[i].ops->trace_collect(rt, gather_one, a);
  if (a->failed) {
    free(a->ev);
    tdm__log(rt, TDM_LOG_ERROR, "trace: out of memory gathering the events");
    return false;
  }
  return true;
}

static int by_edge(const void *a, const void *b) {
  const tdm_trace_event *x = a, *y = b;
  if (x->id != y->id)
    return x->id < y->id ? -1 : 1;
  return (x->id2 > y->id2) - (x->id2 < y->id2);
}

/* The dependency edges moved to the end of a's events, in the order of
 * their successor then predecessor, each once: the graph written is then
 * the same whatever thread recorded an edge, and whether a predecessor
 * had finished when its successor was submitted (an edge recorded
 * through two handles, once running and once finished, counts once). */
static void sort_edges(all_events *a) {
  size_t kept = 0, nedges = 0;
  for (size_t i = 0; i < a->n; i++)
    nedges += a->ev[i].kind == TDM_EV_EDGE;
  tdm_trace_event *edges = nedges ? malloc(nedges * sizeof *edges) : NULL;
  if (nedges && !edges) /* unsorted, then: still every edge */
    return;
  nedges = 0;
  for (size_t i = 0; i < a->n; i++) {
    if (a->ev[i].kind == TDM_EV_EDGE)
      edges[nedges++] = a->ev[i];
    else
      a->ev[kept++] = a->ev[i];
  }
  if (nedges) /* qsort takes no NULL, even for nothing */
    qsort(edges, nedges, sizeof *edges, by_edge);
  for (size_t i = 0; i < nedges; i++)
    if (!i || by_edge(&edges[i], &edges[i - 1]))
      a->ev[kept++] = edges[i];
  a->n = kept;
  free(edges);
}

/* The task event of each task id (NULL: not run yet), and its name. */
typedef struct task_index {
  const tdm_trace_event **ran;
  const char **name;
  uint64_t n;
} task_index;

static bool index_tasks(const tdm_runtime *rt, const all_events *a, task_index *x) {
  x->n = atomic_load(&rt->next_task_id) + 1;
  x->ran = calloc(x->n, sizeof *x->ran);
  x->name = calloc(x->n, sizeof *x->name);
  if (!x->ran || !x->name) {
    free(x->ran);
    free(x->name);
    return false;
  }
  for (size_t i = 0; i < a->n; i++) {
    const tdm_trace_event *e = &a->ev[i];
    if (e->id >= x->n)
      continue;
    if (e->kind == TDM_EV_TASK)
      x->ran[e->id] = e;
    else if (e->kind == TDM_EV_SUBMIT)
      x->name[e->id] = e->name;
  }
  return true;
}

/* ---- the trace ------------------------------------------------------------ */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)tdm__name_or(s); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

/* Tracks: workers by id; copies of device worker k's link after them. */
static unsigned copy_track(const tdm_runtime *rt, unsigned worker, bool to_device) {
  unsigned total = rt->nworkers + rt->ndevice_workers;
  return total + 2 * (worker - rt->nworkers) + (to_device ? 0 : 1);
}

static double us(const tdm_runtime *rt, uint64_t t) {
  return t > rt->trace_t0 ? (double)(t - rt->trace_t0) / 1000.0 : 0.0;
}

/* The application's track: after the workers' and the copies'. */
static unsigned app_track(const tdm_runtime *rt) {
  return rt->nworkers + 3 * rt->ndevice_workers;
}

static unsigned track_of(const tdm_runtime *rt, unsigned track) {
  return track == TDM_TRACK_APP ? app_track(rt) : track;
}

static void track_names(FILE *f, tdm_runtime *rt) {
  unsigned total = rt->nworkers + rt->ndevice_workers;
  tdm_machine_info mi = {.struct_size = sizeof mi};
  bool kinds = tdm_runtime_machine(rt, &mi) == TDM_OK && mi.cpu_kinds > 1;
  fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"args\":{\"name\":\"Tandem\"}}");
  for (unsigned w = 0; w < total; w++) {
    tdm_worker_info wi = {.struct_size = sizeof wi};
    tdm_cpu_kind_info ki = {.struct_size = sizeof ki};
    char name[256], cls[256];
    if (tdm_runtime_worker(rt, w, &wi))
      continue;
    /* its class: the kind of worker tandem-trace's summary adds up by */
    if (wi.type == TDM_WORKER_CPU) {
      snprintf(name, sizeof name, "CPU worker %u (CPUs %s)", w, wi.cpus);
      if (kinds && tdm_runtime_cpu_kind(rt, wi.cpu_kind, &ki) == TDM_OK)
        snprintf(cls, sizeof cls, "CPU workers (%s)", ki.name && *ki.name ? ki.name : "a kind");
      else
        snprintf(cls, sizeof cls, "CPU workers");
    } else {
      snprintf(name, sizeof name, "device %d: %s", wi.device, rt->devices[wi.device].name);
      snprintf(cls, sizeof cls, "%s", name);
    }
    fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":%u,\"args\":{\"name\":",
            w);
    json_str(f, name);
    fprintf(f, ",\"class\":");
    json_str(f, cls);
    fprintf(f, "}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":%u,"
               "\"args\":{\"sort_index\":%u}}",
            w, w);
    if (wi.type == TDM_WORKER_DEVICE)
      for (int dir = 0; dir < 2; dir++) {
        unsigned tid = copy_track(rt, w, dir == 0);
        snprintf(name, sizeof name, "device %d: copies %s", wi.device,
                 dir == 0 ? "host to device" : "device to host");
        fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":%u,"
                   "\"args\":{\"name\":",
                tid);
        json_str(f, name);
        fprintf(f, "}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":%u,"
                   "\"args\":{\"sort_index\":%u}}",
                tid, tid);
      }
  }
  /* pinned tasks, pauses, resumes, cancels: what the application did */
  unsigned app = app_track(rt);
  fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":%u,\"args\":"
             "{\"name\":\"the application's thread (tdm_dispatch)\",\"class\":"
             "\"the application's thread\"}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\","
             "\"pid\":1,\"tid\":%u,\"args\":{\"sort_index\":%u}}",
          app, app, app);
}

/* The application's acts, as instant events on its track. */
static void write_marks(FILE *f, tdm_runtime *rt) {
  tdm_trace_marks *m = &rt->trace_marks;
  tdm__spin_lock(&m->lock);
  for (size_t i = 0; i < m->n; i++) {
    const tdm_trace_mark *k = &m->v[i];
    const char *what = k->kind == TDM_EV_PAUSE    ? "pause"
                       : k->kind == TDM_EV_RESUME ? "resume"
                                                  : "cancel";
    fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"application\",\"name\":\"%s\","
               "\"pid\":1,\"tid\":%u,\"ts\":%.3f",
            what, app_track(rt), us(rt, k->t));
    if (k->kind == TDM_EV_CANCEL) {
      fprintf(f, ",\"args\":{\"group\":");
      json_str(f, k->name);
      fprintf(f, ",\"not_ended\":%llu}", (unsigned long long)k->count);
    }
    fprintf(f, "}");
  }
  tdm__spin_unlock(&m->lock);
}

static bool write_trace(tdm_runtime *rt, const all_events *a, const task_index *x) {
  tdm_outfile o;
  if (!tdm__out_open(rt, &o, AT_FDCWD, rt->cfg.trace_path, 0666, TDM_LOG_ERROR, "trace"))
    return false;
  FILE *f = o.f;
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"Tandem %d.%d.%d\"},\n"
             "\"traceEvents\":[\n",
          TDM_VERSION_MAJOR, TDM_VERSION_MINOR, TDM_VERSION_PATCH);
  track_names(f, rt);
  for (size_t i = 0; i < a->n; i++) {
    const tdm_trace_event *e = &a->ev[i];
    double ts = us(rt, e->t0), dur = e->t1 > e->t0 ? (double)(e->t1 - e->t0) / 1000.0 : 0.0;
    switch (e->kind) {
    case TDM_EV_TASK:
      fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"task\",\"name\":");
      json_str(f, e->name);
      if (e->track == TDM_TRACK_APP)
        fprintf(f, ",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"id\":%llu,"
                   "\"worker\":\"the application's thread\",\"bytes\":%llu}}",
                app_track(rt), ts, dur, (unsigned long long)e->id, (unsigned long long)e->bytes);
      else
        fprintf(f, ",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"id\":%llu,"
                   "\"worker\":%u,\"bytes\":%llu",
                e->track, ts, dur, (unsigned long long)e->id, e->track,
                (unsigned long long)e->bytes);
      if (e->id2 && e->track != TDM_TRACK_APP) /* a chunk: its rows, its elements */
        fprintf(f, ",\"rows\":[%llu,%llu],\"elements\":%llu", (unsigned long long)e->lo,
                (unsigned long long)e->hi, (unsigned long long)e->id2);
      if (e->track != TDM_TRACK_APP)
        fprintf(f, "}}");
      break;
    case TDM_EV_IDLE:
    case TDM_EV_PARKED:
      fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"idle\",\"name\":\"%s\",\"pid\":1,\"tid\":%u,"
                 "\"ts\":%.3f,\"dur\":%.3f}",
              e->kind == TDM_EV_IDLE ? "looking for work" : "parked", e->track, ts, dur);
      break;
    case TDM_EV_TO_DEVICE:
    case TDM_EV_TO_HOST:
      fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"transfer\",\"name\":\"copy %s\",\"pid\":1,"
                 "\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"bytes\":%llu}}",
              e->kind == TDM_EV_TO_DEVICE ? "to device" : "to host",
              copy_track(rt, e->track, e->kind == TDM_EV_TO_DEVICE), ts, dur,
              (unsigned long long)e->bytes);
      break;
    case TDM_EV_EDGE: {
      /* an arrow from the predecessor's slice to the successor's */
      const tdm_trace_event *p = e->id2 < x->n ? x->ran[e->id2] : NULL;
      const tdm_trace_event *s = e->id < x->n ? x->ran[e->id] : NULL;
      if (!p || !s)
        break;
      fprintf(f, ",\n{\"ph\":\"s\",\"cat\":\"dependency\",\"name\":\"dependency\",\"id\":%zu,"
                 "\"pid\":1,\"tid\":%u,\"ts\":%.3f}",
              i, track_of(rt, p->track), us(rt, p->t0));
      fprintf(f, ",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"dependency\",\"name\":\"dependency\","
                 "\"id\":%zu,\"pid\":1,\"tid\":%u,\"ts\":%.3f}",
              i, track_of(rt, s->track), us(rt, s->t0));
      break;
    }
    default:
      break;
    }
  }
  write_marks(f, rt);
  fprintf(f, "\n]}\n");
  if (!tdm__out_commit(rt, &o))
    return false;
  tdm__log(rt, TDM_LOG_INFO, "trace: %zu events written to %s", a->n, rt->cfg.trace_path);
  return true;
}

/* ---- the graph ------------------------------------------------------------ */

/* Colour of the kind of worker that ran a task. */
static const char *colour_of(const tdm_runtime *rt, const tdm_trace_event *ran) {
  if (!ran)
    return "white";
  if (ran->track == TDM_TRACK_APP)
    return "lightyellow";
  if (ran->track < rt->nworkers)
    return "lightblue";
  const tdm_device_record *d = &rt->devices[rt->device_of[ran->track - rt->nworkers]];
  switch (d->cls) {
  case TDM_DEVICE_INTEGRATED_GPU:
    return "palegreen";
  case TDM_DEVICE_DISCRETE_GPU:
    return "orange";
  case TDM_DEVICE_CPU:
    return "khaki";
  default:
    return "plum";
  }
}

static bool write_dag(tdm_runtime *rt, const all_events *a, const task_index *x) {
  tdm_outfile o;
  if (!tdm__out_open(rt, &o, AT_FDCWD, rt->cfg.dag_path, 0666, TDM_LOG_ERROR, "graph"))
    return false;
  FILE *f = o.f;
  fprintf(f, "digraph tandem {\n  node [shape=box, style=filled, fontname=\"sans\"];\n"
             "  subgraph cluster_legend {\n    label=\"ran on\"; fontname=\"sans\";\n"
             "    legend_cpu [label=\"CPU worker\", fillcolor=lightblue];\n"
             "    legend_igpu [label=\"integrated GPU\", fillcolor=palegreen];\n"
             "    legend_dgpu [label=\"discrete GPU\", fillcolor=orange];\n"
             "    legend_cpudev [label=\"OpenCL CPU device\", fillcolor=khaki];\n"
             "    legend_other [label=\"accelerator or emulated device\", fillcolor=plum];\n"
             "    legend_none [label=\"not run\", fillcolor=white];\n  }\n");
  for (uint64_t id = 1; id < x->n; id++) {
    if (!x->name[id] && !x->ran[id])
      continue;
    fprintf(f, "  t%llu [label=", (unsigned long long)id);
    char label[256];
    snprintf(label, sizeof label, "%s #%llu", tdm__name_or(x->name[id]),
             (unsigned long long)id);
    json_str(f, label); /* DOT strings escape as JSON's */
    fprintf(f, ", fillcolor=%s];\n", colour_of(rt, x->ran[id]));
  }
  for (size_t i = 0; i < a->n; i++)
    if (a->ev[i].kind == TDM_EV_EDGE)
      fprintf(f, "  t%llu -> t%llu;\n", (unsigned long long)a->ev[i].id2,
              (unsigned long long)a->ev[i].id);
  fprintf(f, "}\n");
  return tdm__out_commit(rt, &o);
}

tdm_status tdm__trace_write(tdm_runtime *rt) {
  if (!rt->cfg.trace_path && !rt->cfg.dag_path)
    return TDM_OK;
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->trace_lock));
  all_events a;
  task_index x = {0};
  bool ok = gather(rt, &a);
  if (ok)
    sort_edges(&a);
  if (ok && !index_tasks(rt, &a, &x)) {
    tdm__log(rt, TDM_LOG_ERROR, "trace: out of memory");
    free(a.ev);
    ok = false;
  }
  if (ok) {
    if (rt->cfg.trace_path)
      ok = write_trace(rt, &a, &x) && ok;
    if (rt->cfg.dag_path)
      ok = write_dag(rt, &a, &x) && ok;
    free(a.ev);
    free(x.ran);
    free(x.name);
  }
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->trace_lock));
  return ok ? TDM_OK : TDM_ERR_SYSTEM;
}

tdm_status tdm_trace_flush(tdm_runtime *rt) {
  if (!rt)
    return TDM_ERR_INVALID_ARG;
  TDM_FORK_GUARD(rt, "tdm_trace_flush");
  if (!rt->cfg.trace_path) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_trace_flush: no trace was asked for (trace_path)");
    return TDM_ERR_INVALID_ARG;
  }
  return tdm__trace_write(rt);
}

/* ---- statistics ----------------------------------------------------------- */

tdm_status tdm_runtime_worker_stats(const tdm_runtime *rt, unsigned worker,
                                    tdm_worker_stats *out) {
  if (rt)
    TDM_FORK_GUARD(rt, "tdm_runtime_worker_stats");
  if (!rt || !out || out->struct_size < sizeof *out) {
    if (rt)
      tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_worker_stats: NULL or struct_size too small");
    return TDM_ERR_INVALID_ARG;
  }
  unsigned total = rt->nworkers + rt->ndevice_workers;
  if (worker >= total) {
    tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_worker_stats: no worker %u (there are %u)",
             worker, total);
    return TDM_ERR_INVALID_ARG;
  }
  tdm_worker_stats s = {.struct_size = out->struct_size};
  if (worker < rt->nworkers) {
    tdm_worker *w = &rt->workers[worker];
    s.tasks = atomic_load_explicit(&w->tasks_run, memory_order_relaxed);
    s.busy_ns = atomic_load_explicit(&w->busy_ns, memory_order_relaxed);
    s.idle_ns = atomic_load_explicit(&w->idle_ns, memory_order_relaxed);
    s.parked_ns = atomic_load_explicit(&w->parked_ns, memory_order_relaxed);
    s.steals_tried = atomic_load_explicit(&w->steals_tried, memory_order_relaxed);
    s.steals_won = atomic_load_explicit(&w->steals_won, memory_order_relaxed);
  } else {
    unsigned k = worker - rt->nworkers;
    tdm_device_counters c = {.struct_size = sizeof c};
    if (tdm_runtime_device_counters(rt, rt->device_of[k], &c) == TDM_OK)
      s.tasks = c.tasks;
    s.busy_ns = tdm__backend_of(rt, k)->busy_ns(rt, k);
  }
  memcpy(out, &s, sizeof s);
  return TDM_OK;
}

/* Per codelet and kind of worker: how many ran and for how long. */
typedef struct codelet_sum {
  const char *name;
  int where; /* 0: CPU workers, 1: devices, 2: the application's thread */
  uint64_t n, ns;
} codelet_sum;

static void summary_by_codelet(tdm_runtime *rt) {
  all_events a;
  if (!gather(rt, &a))
    return;
  codelet_sum sums[64];
  unsigned ns = 0;
  for (size_t i = 0; i < a.n; i++) {
    const tdm_trace_event *e = &a.ev[i];
    if (e->kind != TDM_EV_TASK)
      continue;
    int where = e->track == TDM_TRACK_APP ? 2 : e->track >= rt->nworkers;
    const char *name = tdm__name_or(e->name);
    unsigned j;
    for (j = 0; j < ns; j++)
      if (sums[j].where == where && !strcmp(sums[j].name, name))
        break;
    if (j == ns) {
      if (ns == 64)
        continue;
      sums[ns++] = (codelet_sum){name, where, 0, 0};
    }
    sums[j].n++;
    sums[j].ns += e->t1 - e->t0;
  }
  free(a.ev);
  for (unsigned j = 0; j < ns; j++)
    tdm__log(rt, TDM_LOG_INFO, "stats: codelet %s on %s: %llu tasks, mean %.1f us",
             sums[j].name,
             (const char *[]){"CPU workers", "devices", "the application's thread"}[sums[j].where],
             (unsigned long long)sums[j].n, (double)sums[j].ns / 1000.0 / (double)sums[j].n);
  if (ns && rt->ndevice_workers) /* placement's predictions, per size and kind of worker */
    tdm__log(rt, TDM_LOG_INFO, "stats: what placement learnt of these codelets: "
             "tandem-models show %.*s",
             (int)(strlen(rt->model_file) - strlen(TDM_MODEL_PREFIX) - strlen(TDM_MODEL_SUFFIX)),
             rt->model_file + strlen(TDM_MODEL_PREFIX));
}

static void stats_report(tdm_runtime *rt) {
  unsigned total = rt->nworkers + rt->ndevice_workers;
  for (unsigned w = 0; w < total; w++) {
    tdm_worker_stats s = {.struct_size = sizeof s};
    if (tdm_runtime_worker_stats(rt, w, &s))
      continue;
    if (w < rt->nworkers) {
      tdm__log(rt, TDM_LOG_INFO,
               "stats: CPU worker %u: %llu tasks, busy %.3f ms, looking for work %.3f ms, "
               "parked %.3f ms, steals %llu won of %llu tried",
               w, (unsigned long long)s.tasks, (double)s.busy_ns / 1e6,
               (double)s.idle_ns / 1e6, (double)s.parked_ns / 1e6,
               (unsigned long long)s.steals_won, (unsigned long long)s.steals_tried);
    } else {
      unsigned d = rt->device_of[w - rt->nworkers];
      tdm_device_counters c = {.struct_size = sizeof c};
      tdm_runtime_device_counters(rt, d, &c);
      tdm__log(rt, TDM_LOG_INFO,
               "stats: device %u (%s): %llu tasks, busy %.3f ms, %llu bytes to it in %llu "
               "copies, %llu bytes back in %llu, %llu evictions",
               d, rt->devices[d].name, (unsigned long long)c.tasks, (double)s.busy_ns / 1e6,
               (unsigned long long)c.bytes_to_device, (unsigned long long)c.copies_to_device,
               (unsigned long long)c.bytes_to_host, (unsigned long long)c.copies_to_host,
               (unsigned long long)c.evictions);
    }
  }
  uint64_t retried = atomic_load_explicit(&rt->nretries, memory_order_relaxed),
           replayed = atomic_load_explicit(&rt->nreplayed, memory_order_relaxed);
  if (retried || replayed)
    tdm__log(rt, TDM_LOG_INFO,
             "stats: failures: %llu tries placed again elsewhere, %llu tasks run again by "
             "lineage (versions a failed device alone held)",
             (unsigned long long)retried, (unsigned long long)replayed);
  summary_by_codelet(rt);
  tdm__verify_report(rt);
}

void tdm__trace_finish(tdm_runtime *rt) {
  if (rt->cfg.stats)
    stats_report(rt);
}
