/*
 * Reductions (TDM_REDUX): tasks that accumulate into a handle run in
 * parallel, each on a private copy of it (a lane), and the lanes are
 * combined into the handle when it is next accessed in another mode.
 *
 * A task's TDM_REDUX buffer is bound to a lane at its submission: the
 * n-th binding of a handle takes lane n mod lanes, and the task is from
 * then on an ordinary TDM_RW access of that lane's copy (a handle of the
 * same shape that the runtime registers), so that dependencies,
 * placement, coherence, devices, retries, lineage and the trace treat it
 * as any task. A lane's first task since its last combination comes
 * after an init task (the reduction's init codelet, TDM_W on the copy).
 * The next access of another mode finds the handle open (task.c's
 * check_and_reserve: TDM__FLUSH) and first submits one task that
 * combines the lanes used, in a fixed tree order, into the handle
 * (TDM_RW on it and on each lane, which the tree adds into one another):
 * one task, so that the combination is submitted whole or not at all,
 * and on the CPU workers only (TDM_TASK_CPU_ONLY): it is not idempotent,
 * so a device must not run it, fail and have it run again, nor the
 * verification mode run it a second time.
 *
 * Binding and combining hold the runtime's redux_lock: a task bound to a
 * lane is submitted before that lane can be combined, and the lane's
 * next init after its combination.
 *
 * The result depends only on the order of submission and the number of
 * lanes, not on where or when the tasks ran. StarPU's STARPU_REDUX keeps
 * a copy per worker instead, bound as a task runs; fixed lanes make the
 * result reproducible, at the price of running a lane's tasks one after
 * another.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

#define MAX_LANES 64

typedef struct tdm_redux {
  const tdm_codelet *init, *combine;
  unsigned lanes, next; /* next: the lane of the next binding, mod lanes */
  uint64_t used;        /* lanes set to the identity since their last combination */
  tdm_handle **copy;    /* each lane's; NULL until its first use */
  void **mem;           /* their memory (tdm_malloc) */
  tdm_codelet *all;     /* all[k - 1]: combines k lanes (k + 1 buffers) */
  tdm_access *modes;    /* TDM_RW for the handle and each lane (their modes) */
} tdm_redux;

/* The combination's arguments: the reduction's CPU function, the lanes. */
typedef struct {
  tdm_cpu_fn fn;
  unsigned k;
} combine_args;

static const char what_set[] = "tdm_handle_set_reduction";

/* The combination: buffer 0 the handle, then the k lanes used, in lane
 * order: lane 1 into 0, 3 into 2, ..., then pairs of those, ..., then
 * lane 0 into the handle. */
static void combine_all(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  combine_args a;
  memcpy(&a, args, sizeof a);
  const tdm_buffer *lane = b + 1;
  for (unsigned s = 1; s < a.k; s *= 2)
    for (unsigned i = 0; i + s < a.k; i += 2 * s) {
      tdm_buffer pair[2] = {lane[i], lane[i + s]};
      a.fn(pair, NULL, 0);
    }
  tdm_buffer pair[2] = {b[0], lane[0]};
  a.fn(pair, NULL, 0);
}

static void redux_delete(tdm_redux *red) {
  if (!red)
    return;
  for (unsigned l = 0; red->mem && l < red->lanes; l++)
    tdm_free(red->mem[l]);
  free(red->copy);
  free(red->mem);
  free(red->all);
  free(red->modes);
  free(red);
}

tdm_status tdm_handle_set_reduction(tdm_handle *h, const tdm_reduction *r) {
  tdm_runtime *rt;
  tdm_status st = tdm__handle_enter(h, what_set, &rt);
  if (st)
    return st;
  if (!r || (r->struct_size && r->struct_size < sizeof *r))
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what_set,
                       "NULL reduction, or its struct_size too small");
  if (h->parent)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what_set,
                       "a tile or piece: give the reduction to a registered handle");
  const tdm_codelet *in = r->init, *cb = r->combine;
  /* (a codelet's struct_size: 0, or its first version's at least) */
  const size_t v1 = offsetof(tdm_codelet, opencl) + sizeof in->opencl;
  if (!in || (in->struct_size && in->struct_size < v1) || in->nbuffers != 1 ||
      in->modes[0] != TDM_W || (!in->cpu_fn && !in->opencl))
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what_set,
                       "init must be a codelet of one buffer, TDM_W, with a variant");
  if (!cb || (cb->struct_size && cb->struct_size < v1) || cb->nbuffers != 2 ||
      cb->modes[0] != TDM_RW || cb->modes[1] != TDM_R || !cb->cpu_fn)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what_set,
                       "combine must be a codelet of two buffers, TDM_RW then TDM_R, with a "
                       "CPU variant");
  unsigned lanes = r->copies ? r->copies : tdm_runtime_nworkers(rt);
  if (lanes > MAX_LANES)
    return tdm__refuse(rt, TDM_ERR_INVALID_ARG, what_set, "more than 64 copies");
  if (!lanes)
    lanes = 1;

  tdm_redux *red = tdm__calloc(rt, 1, sizeof *red);
  if (red) {
    red->copy = tdm__calloc(rt, lanes, sizeof *red->copy);
    red->mem = tdm__calloc(rt, lanes, sizeof *red->mem);
    red->all = tdm__calloc(rt, lanes, sizeof *red->all);
    red->modes = tdm__calloc(rt, lanes + 1, sizeof *red->modes);
  }
  if (!red || !red->copy || !red->mem || !red->all || !red->modes) {
    redux_delete(red);
    return tdm__refuse(rt, TDM_ERR_NO_MEMORY, what_set, "out of memory");
  }
  red->init = in;
  red->combine = cb;
  red->lanes = lanes;
  for (unsigned l = 0; l <= lanes; l++)
    red->modes[l] = TDM_RW;
  for (unsigned k = 1; k <= lanes; k++) {
    tdm_codelet *c = &red->all[k - 1];
    c->name = cb->name;
    c->cpu_fn = combine_all;
    c->nbuffers = k + 1;
    if (k + 1 <= TDM_MAX_BUFFERS)
      memcpy(c->modes, red->modes, (k + 1) * sizeof *red->modes);
    else
      c->dyn_modes = red->modes;
  }
  tdm__spin_lock(&rt->redux_lock);
  tdm__spin_lock(&h->lock);
  bool had = h->redux != NULL;
  if (!had)
    h->redux = red;
  tdm__spin_unlock(&h->lock);
  tdm__spin_unlock(&rt->redux_lock);
  if (had) {
    redux_delete(red);
    return tdm__refuse(rt, TDM_ERR_BUSY, what_set, "the handle has a reduction already");
  }
  return TDM_OK;
}

/* redux_lock, taken unless this thread holds it (a submission made while
 * binding or combining). Returns whether it took it. */
static _Thread_local const tdm_runtime *holder TDM_TLS_MODEL;
static bool enter(tdm_runtime *rt) {
  if (holder == rt)
    return false;
  tdm__spin_lock(&rt->redux_lock);
  holder = rt;
  return true;
}
static void leave(tdm_runtime *rt, bool took) {
  if (!took)
    return;
  holder = NULL;
  tdm__spin_unlock(&rt->redux_lock);
}

static void set_open(tdm_handle *h, bool open) {
  tdm__spin_lock(&h->lock);
  h->unusual = open ? (uint8_t)(h->unusual | TDM__H_LANES) : (uint8_t)(h->unusual & ~TDM__H_LANES);
  tdm__spin_unlock(&h->lock);
}

/* redux_lock held: h's lanes used, combined into it. */
static tdm_status flush_locked(tdm_handle *h) {
  tdm_redux *red = h->redux;
  if (!red || !red->used)
    return TDM_OK;
  tdm_handle *hs[MAX_LANES + 1];
  unsigned k = 0;
  hs[0] = h;
  for (unsigned l = 0; l < red->lanes; l++)
    if (red->used >> l & 1)
      hs[1 + k++] = red->copy[l];
  combine_args a;
  memset(&a, 0, sizeof a); /* (its padding too: the task copies it) */
  a.fn = red->combine->cpu_fn;
  a.k = k;
  tdm_task_desc d = {.codelet = &red->all[k - 1], .args = &a, .args_size = sizeof a,
                     .flags = TDM_TASK_CPU_ONLY};
  if (k + 1 <= TDM_MAX_BUFFERS)
    memcpy(d.handles, hs, (k + 1) * sizeof *hs);
  else
    d.dyn_handles = hs;
  set_open(h, false); /* its own access must not combine again */
  tdm_status st = tdm__submit_internal(h->rt, &d, "a reduction's combination");
  if (st) {
    set_open(h, true); /* the lanes keep what they hold */
    return st;
  }
  red->used = 0;
  return TDM_OK;
}

tdm_status tdm__redux_flush(tdm_handle *h) {
  bool took = enter(h->rt);
  tdm_status st = flush_locked(h);
  leave(h->rt, took);
  return st;
}

tdm_status tdm__redux_flush_task(tdm_task *t) {
  tdm_handle *const *hs = tdm__task_handles(t);
  bool took = enter(t->rt);
  tdm_status st = TDM_OK;
  for (unsigned i = 0; i < t->nbuf && !st; i++)
    st = flush_locked(hs[i]);
  leave(t->rt, took);
  return st;
}

/* redux_lock held: lane l of h's reduction has its copy. */
static tdm_status lane_copy(tdm_runtime *rt, tdm_handle *h, unsigned l) {
  tdm_redux *red = h->redux;
  if (red->copy[l])
    return TDM_OK;
  const tdm_buffer *b = &h->buf;
  size_t bytes = b->nx * b->ny * b->elem_size;
  void *mem = tdm_malloc(bytes ? bytes : 1);
  if (!mem) {
    tdm__log(rt, TDM_LOG_ERROR, "TDM_REDUX: out of memory for a private copy (%zu bytes)", bytes);
    return TDM_ERR_NO_MEMORY;
  }
  tdm_handle *c;
  tdm_status st = h->kind == TDM_HANDLE_VECTOR
                      ? tdm_register_vector(rt, mem, b->nx, b->elem_size, &c)
                      : tdm_register_matrix(rt, mem, b->ny, b->nx, b->ny, b->elem_size, &c);
  if (st) {
    tdm_free(mem);
    return st;
  }
  red->copy[l] = c;
  red->mem[l] = mem;
  return TDM_OK;
}

/* Moves a created task's count (h->unsubmitted) from one handle to
 * another: its submission undoes it on the handle it then names. */
static void move_count(tdm_handle *from, tdm_handle *to) {
  tdm__spin_lock(&from->lock);
  from->unsubmitted--;
  tdm__spin_unlock(&from->lock);
  tdm__spin_lock(&to->lock);
  to->unsubmitted++;
  tdm__spin_unlock(&to->lock);
}

tdm_status tdm__redux_submit(tdm_task *t, bool give_ref) {
  tdm_runtime *rt = t->rt;
  unsigned n = t->nbuf;
  tdm_handle **hs = t->more ? t->more->handles : t->handles;
  uint8_t *modes = t->more ? t->more->modes : t->modes;
  tdm_handle *room[TDM_MAX_BUFFERS], **orig = room; /* each bound buffer's handle */
  unsigned lroom[TDM_MAX_BUFFERS], *lane = lroom;
  if (n > TDM_MAX_BUFFERS) {
    orig = tdm__malloc(rt, n * (sizeof *orig + sizeof *lane));
    if (!orig) {
      tdm__log(rt, TDM_LOG_ERROR, "submit of %s: out of memory", tdm__codelet_name(t));
      return TDM_ERR_NO_MEMORY;
    }
    lane = (unsigned *)(void *)(orig + n);
  }
  memset(orig, 0, n * sizeof *orig);
  bool took = enter(rt);
  tdm_status st = TDM_OK;
  /* what it accesses in other modes comes after what was accumulated */
  for (unsigned i = 0; i < n && !st; i++)
    if (modes[i] != TDM_REDUX)
      st = flush_locked(hs[i]);
  /* each handle's next lane (a handle named twice: one lane), whose
   * copy is made and, when first used since it was combined, set to the
   * identity by an init task submitted first */
  for (unsigned i = 0; i < n && !st; i++) {
    if (modes[i] != TDM_REDUX)
      continue;
    tdm_handle *h = orig[i] = hs[i];
    unsigned j = 0;
    while (j < i && orig[j] != h)
      j++;
    if (j < i) {
      lane[i] = lane[j];
      continue;
    }
    tdm__spin_lock(&h->lock);
    bool dead = atomic_load_explicit(&h->magic, memory_order_relaxed) != TDM_HANDLE_MAGIC;
    bool parted = h->tiles != NULL;
    tdm__spin_unlock(&h->lock);
    if (dead || parted) {
      st = dead ? TDM_ERR_STALE_HANDLE : TDM_ERR_PARTITIONED;
      tdm__log(rt, TDM_LOG_ERROR, "submit of %s refused: a handle was %s", tdm__codelet_name(t),
               dead ? "unregistered" : "partitioned (use its tiles)");
      break;
    }
    tdm_redux *red = h->redux;
    unsigned l = lane[i] = red->next % red->lanes;
    st = lane_copy(rt, h, l);
    if (!st && !(red->used >> l & 1)) {
      tdm_task_desc d = {.codelet = red->init, .handles = {red->copy[l]}};
      st = tdm__submit_internal(rt, &d, "a reduction's init");
    }
  }
  if (!st) {
    for (unsigned i = 0; i < n; i++)
      if (orig[i]) {
        tdm_handle *c = orig[i]->redux->copy[lane[i]];
        if (t->user_ref)
          move_count(orig[i], c);
        hs[i] = c;
        modes[i] = TDM_RW;
      }
    t->redux = false;
    st = tdm__task_submit(t, give_ref);
    if (!st) {
      for (unsigned i = 0; i < n; i++) {
        unsigned j = 0;
        while (j < i && orig[j] != orig[i])
          j++;
        if (orig[i] && j == i) { /* once per handle */
          tdm_redux *red = orig[i]->redux;
          red->used |= 1ull << lane[i];
          red->next = (red->next + 1) % red->lanes;
          if (!(orig[i]->unusual & TDM__H_LANES)) /* (under redux_lock: readable) */
            set_open(orig[i], true);
        }
      }
    } else { /* as it was: a created task may be submitted again */
      for (unsigned i = 0; i < n; i++)
        if (orig[i]) {
          if (t->user_ref)
            move_count(hs[i], orig[i]);
          hs[i] = orig[i];
          modes[i] = TDM_REDUX;
        }
      t->redux = true;
    }
  }
  leave(rt, took);
  if (orig != room)
    free(orig);
  return st;
}

void tdm__redux_flush_all(tdm_runtime *rt) {
  for (;;) {
    tdm_handle *found = NULL;
    TDM_PTHREAD(rt, pthread_mutex_lock(&rt->handles_lock));
    for (tdm_handle *h = rt->all_handles; h && !found; h = h->all_next) {
      tdm__spin_lock(&h->lock);
      if ((h->unusual & TDM__H_LANES) && atomic_load(&h->magic) == TDM_HANDLE_MAGIC) {
        found = h;
        tdm__handle_ref(h);
      }
      tdm__spin_unlock(&h->lock);
    }
    TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->handles_lock));
    if (!found)
      return;
    tdm_status st = tdm__redux_flush(found);
    tdm__handle_unref(found);
    if (st) {
      tdm__log(rt, TDM_LOG_ERROR, "tdm_runtime_destroy: a reduction's lanes could not be "
               "combined (%s): its handle's memory lacks them", tdm_status_name(st));
      return;
    }
  }
}

void tdm__redux_free(tdm_handle *h, bool at_destroy) {
  tdm_redux *red = h->redux;
  if (!red)
    return;
  h->redux = NULL;
  /* the combination that read the lanes has ended (its handle's tasks
   * were waited for); at destroy every handle goes with the runtime */
  for (unsigned l = 0; !at_destroy && l < red->lanes; l++)
    if (red->copy[l])
      (void)tdm_handle_unregister(red->copy[l]); /* (lost: a failed task's, told then) */
  redux_delete(red);
}
