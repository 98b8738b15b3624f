/*
 * libtandem-mpi: the sequential task flow over MPI ranks (tandem/mpi.h).
 * It uses Tandem's public API only, as an application would.
 *
 * Every rank sees every submission. Each distributed handle has a
 * version, which every rank counts alike (a task that writes it makes
 * the next), and, for every rank, the version that rank's memory of it
 * holds (its owner: always the current one; another rank: the last it
 * received). A task runs on the owner of what it writes; for each input
 * owned elsewhere whose current version that rank lacks, every rank
 * counts one transfer, numbered alike on all ranks (the message's tag):
 * the owner submits a send task (TDM_R on the handle) and the runner a
 * receive task (TDM_W on its own memory of it), both ordered by the
 * runtime's dependencies like any task. Neither blocks a worker: its
 * function hands the request to the progress thread and defers the
 * task's end (tdm_task_defer), which the progress thread makes when the
 * request completes. A rank's memory of a handle it does not own is thus
 * the cache of the copies received: used again while the version holds,
 * overwritten by the next one received after every reader of the old
 * one.
 *
 * The progress thread makes every MPI call of m after its creation (so
 * MPI_THREAD_SERIALIZED is enough): it posts the requests handed to it,
 * tests those posted (MPI_Testsome), ends their tasks, and sleeps: until
 * a request is handed to it when none is posted, else for a time that
 * doubles from 2 us to 512 us while nothing completes (the latency a
 * completion may wait, bounded so; no core is spun on). The collectives
 * (the comparison of the ranks' checksums, the gathering of weights)
 * are its non-blocking requests too, posted in the order the
 * application makes its calls, which is every rank's.
 */
#include "tandem/mpi.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_MIN_NS 2000ull
#define POLL_MAX_NS 512000ull

/* A distributed handle. */
typedef struct dist {
  tdm_handle *h;
  uint64_t key;
  int owner;
  uint64_t ver;   /* its current version */
  uint64_t *has; /* has[r]: the version rank r's memory holds (or UINT64_MAX: none) */
} dist;

/* An index of the distributed handles (see reserve). */
typedef struct dindex {
  dist **slot;
  size_t cap; /* a power of two, or 0 */
} dindex;

/* A collective of m, posted and completed by the progress thread: the
 * agreement (each rank's checksum of its calls, tdm_mpi_wait_all and
 * others compare them) or the gathering of the weights. m's list keeps
 * it (the submitting thread's), until done; one posted when the ranks
 * diverged never completes (stuck) and is kept till destroy (MPI lets
 * no such request be freed). */
typedef struct coll {
  struct coll *next;
  bool gather;
  const char *what; /* the call it checks (for the log) */
  /* agreement: {sum, ~sum, calls, ~calls}, and their maxima (the
   * ranks' most and, complemented, least calls) */
  uint64_t mine[4], max[4];
  double weight, *weights;  /* gathering */
  bool done, stuck;         /* m->lock */
  tdm_status st;            /* m->lock */
} coll;

/* A request for the progress thread: a send or a receive of a task's
 * buffer, whose end it makes, or a collective. */
typedef struct op {
  struct op *next;
  bool send;
  bool cancelled; /* a receive cancelled when the ranks diverged */
  tdm_buffer buf; /* the task's view of the handle's memory */
  MPI_Datatype type; /* its rows, when ld leaves gaps (made by the progress thread) */
  int peer, tag;
  /* The task it ends; NULL for a send of nothing that tells the peer
   * the version it waits for is lost (its send task was cancelled), and
   * for a collective. */
  tdm_deferred *task;
  coll *coll;
  uint64_t bytes;
  tdm_status st; /* how it ended */
} op;

/* What is posted: ops and their requests, in step. */
typedef struct posted {
  op **ops;
  MPI_Request *reqs;
  int *done;
  MPI_Status *stats;
  int n, cap;
} posted;

struct tdm_mpi {
  tdm_runtime *rt;
  MPI_Comm comm;
  int rank, size, tag_ub;
  /* the distributed handles, n of them, by address and by key */
  dindex by_handle, by_key;
  size_t n;
  uint64_t seq; /* transfers counted so far (every rank alike) */
  /* The checksum of the calls made so far that every rank makes alike
   * (declarations, submissions, fetches, waits), and the collectives
   * that compare it: the submitting thread's. */
  uint64_t sum, calls;
  coll *colls;
  /* the progress thread and what is handed to it */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  pthread_cond_t ended; /* a collective done (lock) */
  /* MPI was initialised below MPI_THREAD_MULTIPLE: every MPI call of
   * every tdm_mpi of the process holds `serial` (serial_enter). */
  bool serialized;
  op *head, *tail; /* handed, not posted (lock) */
  bool stop;       /* lock */
  /* What is posted: the progress thread's, and an idle worker's while it
   * holds poll_lock (tdm_runtime_add_idle_fn); how many, for a look
   * without it. */
  pthread_mutex_t poll_lock;
  struct posted posted;
  _Atomic int nposted;
  _Atomic uint64_t by_workers; /* requests found complete by idle workers */
  bool idle_polling;           /* idle_poll added to the runtime */
  /* The ranks were found to differ (TDM_ERR_DIVERGED), or a collective
   * failed (TDM_ERR_SYSTEM): m takes no more work, and its requests end
   * with that status. */
  _Atomic int broken;
  _Atomic uint64_t sent, received, bytes_sent, bytes_received;
  uint64_t cache_hits, tasks_run, tasks_skipped; /* the submitting thread's */
};

/* Under MPI_THREAD_SERIALIZED, one MPI call at a time in the process:
 * the progress threads of several tdm_mpi, and the application's
 * thread in tdm_mpi_create and _destroy, take turns. (The one state
 * libtandem-mpi shares across its objects.) */
static pthread_mutex_t serial = PTHREAD_MUTEX_INITIALIZER;

static void serial_enter(bool serialized) {
  if (serialized)
    pthread_mutex_lock(&serial);
}

static void serial_leave(bool serialized) {
  if (serialized)
    pthread_mutex_unlock(&serial);
}

/* ---- the progress thread -------------------------------------------------- */

/* Room in p for one more op; false: out of memory. */
static bool room(posted *p) {
  if (p->n < p->cap)
    return true;
  int c = p->cap ? 2 * p->cap : 16;
  op **o = realloc(p->ops, (size_t)c * sizeof *o);
  if (o)
    p->ops = o;
  MPI_Request *r = o ? realloc(p->reqs, (size_t)c * sizeof *r) : NULL;
  if (r)
    p->reqs = r;
  int *d = r ? realloc(p->done, (size_t)c * sizeof *d) : NULL;
  if (d)
    p->done = d;
  MPI_Status *s = d ? realloc(p->stats, (size_t)c * sizeof *s) : NULL;
  if (!s)
    return false;
  p->stats = s;
  p->cap = c;
  return true;
}

/* Ends o as o->st says (its task, or its collective's waiter), frees it. */
static void retire(tdm_mpi *m, op *o) {
  if (o->coll) {
    pthread_mutex_lock(&m->lock);
    o->coll->st = o->st;
    o->coll->done = true;
    pthread_cond_broadcast(&m->ended);
    pthread_mutex_unlock(&m->lock);
  } else if (o->task) {
    if (o->st == TDM_OK || o->st == TDM_ERR_LOST) {
      atomic_fetch_add(o->send ? &m->sent : &m->received, 1);
      if (o->st == TDM_OK)
        atomic_fetch_add(o->send ? &m->bytes_sent : &m->bytes_received, o->bytes);
    }
    /* (a receive told its version is lost fails, as its writer did) */
    tdm_deferred_end(o->task, o->st);
  } else if (o->st == TDM_OK) { /* a notice sent */
    atomic_fetch_add(&m->sent, 1);
  }
  free(o);
}

/* What o's data travels as: one of its rows' vector type, when ld
 * leaves gaps, else bytes; and how many of them. */
static MPI_Datatype type_of(const op *o) {
  return o->type != MPI_DATATYPE_NULL ? o->type : MPI_BYTE;
}

static int elements(const op *o) {
  return o->type != MPI_DATATYPE_NULL ? 1 : (int)o->bytes;
}

/* Posts o (MPI lock held): TDM_OK, or the status it ends with. */
static tdm_status post(tdm_mpi *m, op *o, MPI_Request *req) {
  int broken = atomic_load(&m->broken);
  if (broken)
    return (tdm_status)broken;
  int rc = MPI_SUCCESS;
  if (o->coll) {
    coll *c = o->coll;
    rc = c->gather ? MPI_Iallgather(&c->weight, 1, MPI_DOUBLE, c->weights, 1, MPI_DOUBLE,
                                    m->comm, req)
                   : MPI_Iallreduce(c->mine, c->max, 4, MPI_UINT64_T, MPI_MAX, m->comm, req);
    return rc == MPI_SUCCESS ? TDM_OK : TDM_ERR_SYSTEM;
  }
  /* its elements as they lie in memory: rows of ny elements, ld apart */
  const tdm_buffer *b = &o->buf;
  if (b->ny > 1 && b->ld != b->ny) {
    rc = MPI_Type_vector((int)b->nx, (int)(b->ny * b->elem_size), (int)(b->ld * b->elem_size),
                         MPI_BYTE, &o->type);
    if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(&o->type)) != MPI_SUCCESS)
      MPI_Type_free(&o->type);
  }
  /* (a notice that the version is lost: no data) */
  int count = o->task ? elements(o) : 0;
  if (rc == MPI_SUCCESS)
    rc = o->send ? MPI_Isend(b->ptr, count, type_of(o), o->peer, o->tag, m->comm, req)
                 : MPI_Irecv(b->ptr, count, type_of(o), o->peer, o->tag, m->comm, req);
  if (rc != MPI_SUCCESS && o->type != MPI_DATATYPE_NULL)
    MPI_Type_free(&o->type);
  return rc == MPI_SUCCESS ? TDM_OK : TDM_ERR_SYSTEM;
}

/* Whether every rank's checksum is this one's (the maxima of {sum,
 * ~sum} are {sum, ~sum}), and the fewest and most calls a rank made.
 * Its own function, so that ThreadSanitizer's suppressions can name it:
 * the application's thread may have written c->max inside an MPI call
 * of its own (Open MPI completes requests in whichever thread calls it,
 * ordered by atomics ThreadSanitizer does not see). */
static __attribute__((noinline)) bool agreed(const coll *c, uint64_t *fewest, uint64_t *most) {
  *fewest = ~c->max[3];
  *most = c->max[2];
  return c->max[0] == c->mine[0] && c->max[1] == c->mine[1];
}

/* How o, completed with status *s, ended (MPI lock held). error: the
 * request's own error (MPI_ERR_IN_STATUS), else MPI_SUCCESS. */
static tdm_status outcome(tdm_mpi *m, op *o, MPI_Status *s, int error) {
  if (error != MPI_SUCCESS && MPI_Error_class(error, &error) != MPI_SUCCESS)
    error = MPI_ERR_OTHER;
  if (error == MPI_ERR_TRUNCATE || o->cancelled) {
    if (!o->cancelled)
      tdm_runtime_log(m->rt, TDM_LOG_ERROR, "tandem-mpi: rank %d: a message from rank %d "
                      "(tag %d) is larger than the handle it should fill (%llu bytes): the "
                      "ranks do not declare or submit alike", m->rank, o->peer, o->tag,
                      (unsigned long long)o->bytes);
    return TDM_ERR_DIVERGED;
  }
  if (error != MPI_SUCCESS)
    return TDM_ERR_SYSTEM;
  if (o->coll) {
    coll *c = o->coll;
    uint64_t fewest, most;
    if (c->gather || agreed(c, &fewest, &most))
      return TDM_OK;
    tdm_runtime_log(m->rt, TDM_LOG_ERROR, "tandem-mpi: rank %d: at %s, the ranks' checksums of "
                    "what they declared and submitted differ (this rank's %016llx, after %llu "
                    "calls; the ranks made %llu to %llu): they did not make the same calls in "
                    "the same order; the distributed run stops", m->rank, c->what,
                    (unsigned long long)c->mine[0], (unsigned long long)c->mine[2],
                    (unsigned long long)fewest, (unsigned long long)most);
    return TDM_ERR_DIVERGED;
  }
  if (o->send)
    return TDM_OK;
  int got = -1;
  if (MPI_Get_count(s, type_of(o), &got) != MPI_SUCCESS)
    return TDM_ERR_SYSTEM;
  if (!got)
    return TDM_ERR_LOST; /* the notice: the sender's version was never produced */
  if (got != elements(o)) {
    tdm_runtime_log(m->rt, TDM_LOG_ERROR, "tandem-mpi: rank %d: a message from rank %d (tag %d) "
                    "is smaller than the handle it should fill (%llu bytes): the ranks do not "
                    "declare or submit alike", m->rank, o->peer, o->tag,
                    (unsigned long long)o->bytes);
    return TDM_ERR_DIVERGED;
  }
  return TDM_OK;
}

/* The ranks diverged (or a collective failed): what is posted is given
 * up (MPI lock held). Sends are let go (a peer's receive is never posted
 * now); receives cancelled, kept until MPI says so (one matched already
 * is still being written); collectives never complete (stuck). Those
 * given up are moved to *out. */
static void give_up(tdm_mpi *m, posted *p, tdm_status why, op **out) {
  int j = 0;
  for (int i = 0; i < p->n; i++) {
    op *o = p->ops[i];
    if (!o->send && !o->coll) {
      if (!o->cancelled) {
        o->cancelled = true;
        MPI_Cancel(&p->reqs[i]);
      }
      p->ops[j] = o;
      p->reqs[j++] = p->reqs[i];
      continue;
    }
    if (o->coll) {
      pthread_mutex_lock(&m->lock);
      o->coll->stuck = true;
      pthread_mutex_unlock(&m->lock);
    } else {
      MPI_Request_free(&p->reqs[i]);
    }
    if (o->type != MPI_DATATYPE_NULL)
      MPI_Type_free(&o->type);
    o->st = why;
    o->next = *out;
    *out = o;
  }
  p->n = j;
}

/* One pass (poll_lock held): posts `fresh` (the progress thread's), tests
 * what is posted, ends what completed. `idle`: an idle worker's, which
 * never waits for the MPI lock. The requests found complete, or -1 when
 * the MPI lock was busy. */
static int pass(tdm_mpi *m, op *fresh, bool idle) {
  posted *p = &m->posted;
  if (m->serialized) {
    if (!idle)
      pthread_mutex_lock(&serial);
    else if (pthread_mutex_trylock(&serial))
      return -1;
  }
  op *ended = NULL; /* to retire, outside the MPI lock */
  for (op *o = fresh, *next; o; o = next) {
    next = o->next;
    o->st = room(p) ? post(m, o, &p->reqs[p->n]) : TDM_ERR_NO_MEMORY;
    if (o->st) { /* (nothing posted for it) */
      o->next = ended;
      ended = o;
    } else {
      p->ops[p->n++] = o;
    }
  }
  int ndone = 0, rc = MPI_SUCCESS;
  if (p->n) {
    rc = MPI_Testsome(p->n, p->reqs, &ndone, p->done, p->stats);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
      ndone = MPI_UNDEFINED;
  }
  int broke = 0;
  if (ndone == MPI_UNDEFINED) { /* an error: every request posted fails */
    tdm_runtime_log(m->rt, TDM_LOG_ERROR, "tandem-mpi: rank %d: MPI_Testsome failed (%d)",
                    m->rank, rc);
    for (int i = 0; i < p->n; i++)
      p->done[i] = i;
    ndone = p->n;
    broke = TDM_ERR_SYSTEM;
  }
  for (int k = 0; k < ndone; k++) {
    op *o = p->ops[p->done[k]];
    o->st = broke ? TDM_ERR_SYSTEM
                  : outcome(m, o, &p->stats[k],
                            rc == MPI_ERR_IN_STATUS ? p->stats[k].MPI_ERROR : MPI_SUCCESS);
    if (o->coll && o->st)
      broke = o->st;
    if (o->type != MPI_DATATYPE_NULL)
      MPI_Type_free(&o->type);
    o->next = ended;
    ended = o;
    p->ops[p->done[k]] = NULL;
  }
  if (ndone) { /* the ended ones out, the order kept */
    int j = 0;
    for (int i = 0; i < p->n; i++)
      if (p->ops[i]) {
        p->ops[j] = p->ops[i];
        p->reqs[j++] = p->reqs[i];
      }
    p->n = j;
  }
  if (broke) {
    int none = 0;
    atomic_compare_exchange_strong(&m->broken, &none, broke);
  }
  if (atomic_load(&m->broken))
    give_up(m, p, (tdm_status)atomic_load(&m->broken), &ended);
  atomic_store(&m->nposted, p->n);
  serial_leave(m->serialized);
  if (idle)
    atomic_fetch_add(&m->by_workers, (uint64_t)ndone);
  for (op *o = ended, *next; o; o = next) {
    next = o->next;
    retire(m, o);
  }
  return ndone;
}

/* An idle worker's look at the requests posted, while the progress
 * thread naps (tdm_runtime_add_idle_fn): what completed ends sooner. */
static void idle_poll(void *arg) {
  tdm_mpi *m = arg;
  if (!atomic_load_explicit(&m->nposted, memory_order_relaxed) ||
      pthread_mutex_trylock(&m->poll_lock))
    return;
  pass(m, NULL, true);
  pthread_mutex_unlock(&m->poll_lock);
}

static void *progress(void *arg) {
  tdm_mpi *m = arg;
  uint64_t nap = POLL_MIN_NS;
  for (;;) {
    pthread_mutex_lock(&m->lock);
    while (!atomic_load(&m->nposted) && !m->head && !m->stop)
      pthread_cond_wait(&m->cond, &m->lock);
    op *fresh = m->head;
    m->head = m->tail = NULL;
    bool stop = m->stop && !atomic_load(&m->nposted) && !fresh;
    pthread_mutex_unlock(&m->lock);
    if (stop)
      break;
    pthread_mutex_lock(&m->poll_lock);
    int ndone = pass(m, fresh, false);
    pthread_mutex_unlock(&m->poll_lock);
    if (ndone) {
      nap = POLL_MIN_NS;
    } else if (atomic_load(&m->nposted) && !fresh) {
      /* a nap, cut short by a request handed over */
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      uint64_t ns = (uint64_t)until.tv_nsec + nap;
      until.tv_sec += (time_t)(ns / 1000000000ull);
      until.tv_nsec = (long)(ns % 1000000000ull);
      pthread_mutex_lock(&m->lock);
      if (!m->head && !m->stop)
        pthread_cond_timedwait(&m->cond, &m->lock, &until);
      pthread_mutex_unlock(&m->lock);
      nap = nap * 2 > POLL_MAX_NS ? POLL_MAX_NS : nap * 2;
    }
  }
  return NULL;
}

/* ---- the transfer tasks -------------------------------------------------------- */

typedef struct {
  tdm_mpi *m;
  int peer, tag;
  bool send;
} xfer_args;

static void hand_over(tdm_mpi *m, op *o) {
  pthread_mutex_lock(&m->lock);
  if (m->tail)
    m->tail->next = o;
  else
    m->head = o;
  m->tail = o;
  pthread_cond_signal(&m->cond);
  pthread_mutex_unlock(&m->lock);
}

static void xfer(const tdm_buffer *b, const void *args, size_t size) {
  (void)size;
  const xfer_args *a = args;
  tdm_deferred *task = tdm_task_defer();
  op *o = malloc(sizeof *o);
  if (!o) {
    tdm_deferred_end(task, TDM_ERR_NO_MEMORY);
    return;
  }
  *o = (op){.send = a->send, .buf = b[0], .type = MPI_DATATYPE_NULL, .peer = a->peer,
            .tag = a->tag, .task = task,
            .bytes = (uint64_t)b[0].nx * b[0].ny * b[0].elem_size};
  hand_over(a->m, o);
}

/* A send task's end: when it did not send (cancelled: the version it
 * would send was never produced, or its group was cancelled; or failed),
 * the peer, whose receive waits, is told so by a message of nothing, and
 * its receive fails as the writer did here: its readers are cancelled,
 * the handle is lost there too, no rank waits forever. */
static void send_ended(void *data) {
  xfer_args *a = data;
  if (tdm_callback_status() != TDM_OK) {
    op *o = malloc(sizeof *o);
    if (o) { /* (else the peer waits: out of memory here) */
      *o = (op){.send = true, .type = MPI_DATATYPE_NULL, .peer = a->peer, .tag = a->tag};
      hand_over(a->m, o);
    }
  }
  free(a);
}

static const tdm_codelet send_cl = {.name = "tandem-mpi-send", .cpu_fn = xfer, .nbuffers = 1,
                                    .modes = {TDM_R}};
static const tdm_codelet recv_cl = {.name = "tandem-mpi-recv", .cpu_fn = xfer, .nbuffers = 1,
                                    .modes = {TDM_W}};

/* ---- creation ------------------------------------------------------------------ */

tdm_status tdm_mpi_create(tdm_runtime *rt, MPI_Comm comm, tdm_mpi **out) {
  if (!out)
    return TDM_ERR_INVALID_ARG;
  *out = NULL;
  if (!rt || comm == MPI_COMM_NULL)
    return TDM_ERR_INVALID_ARG;
  /* (the serial lock, whatever the level: other objects' progress
   * threads may be calling MPI under MPI_THREAD_SERIALIZED) */
  serial_enter(true);
  int inited = 0, finalized = 0, level = MPI_THREAD_SINGLE;
  bool usable = MPI_Initialized(&inited) == MPI_SUCCESS && inited &&
                MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized &&
                MPI_Query_thread(&level) == MPI_SUCCESS && level >= MPI_THREAD_SERIALIZED;
  tdm_mpi *m = usable ? calloc(1, sizeof *m) : NULL;
  tdm_status st = !usable ? TDM_ERR_INVALID_ARG : !m ? TDM_ERR_NO_MEMORY : TDM_OK;
  /* The duplication is collective: under MPI_THREAD_MULTIPLE, without
   * the lock, or two threads creating on two communicators at once
   * could each hold it on one rank while waiting for the other rank,
   * which holds it for the other thread. (Under SERIALIZED, two at once
   * are the application's MPI calls at once.) */
  if (level >= MPI_THREAD_MULTIPLE)
    serial_leave(true);
  if (!st && MPI_Comm_dup(comm, &m->comm) != MPI_SUCCESS)
    st = TDM_ERR_SYSTEM;
  /* errors come back as statuses (a message larger than its receive is
   * a TDM_ERR_DIVERGED, not the end of the process) */
  if (!st && MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
    MPI_Comm_free(&m->comm);
    st = TDM_ERR_SYSTEM;
  }
  if (!st) {
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
    int *ub = NULL, found = 0;
    MPI_Comm_get_attr(m->comm, MPI_TAG_UB, &ub, &found);
    m->tag_ub = found && ub ? *ub : 32767;
  }
  if (level < MPI_THREAD_MULTIPLE)
    serial_leave(true);
  if (st) {
    free(m);
    return st;
  }
  m->rt = rt;
  m->serialized = level < MPI_THREAD_MULTIPLE;
  bool polled = !pthread_mutex_init(&m->poll_lock, NULL);
  bool locked = polled && !pthread_mutex_init(&m->lock, NULL);
  bool cond = locked && !pthread_cond_init(&m->cond, NULL);
  bool ended = cond && !pthread_cond_init(&m->ended, NULL);
  bool started = ended && !pthread_create(&m->thread, NULL, progress, m);
  if (!started) {
    if (ended)
      pthread_cond_destroy(&m->ended);
    if (cond)
      pthread_cond_destroy(&m->cond);
    if (locked)
      pthread_mutex_destroy(&m->lock);
    if (polled)
      pthread_mutex_destroy(&m->poll_lock);
    serial_enter(m->serialized);
    MPI_Comm_free(&m->comm);
    serial_leave(m->serialized);
    free(m);
    return TDM_ERR_SYSTEM;
  }
  /* the idle workers poll too (else, with as many functions there as
   * the runtime takes, the progress thread alone) */
  m->idle_polling = tdm_runtime_add_idle_fn(rt, idle_poll, m) == TDM_OK;
  if (!m->idle_polling)
    tdm_runtime_log(rt, TDM_LOG_WARNING, "tandem-mpi: no idle function left in the runtime "
                    "(TDM_MAX_IDLE_FNS): only the progress thread tests the messages");
  *out = m;
  return TDM_OK;
}

/* ---- the check that the ranks make the same calls ------------------------------ */

/* Folds v into m's checksum (the SplitMix64 finaliser, Steele, Lea and
 * Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014,
 * as a mixing step: every bit of v and of the sum so far reaches every
 * bit of the next). */
static void fold(tdm_mpi *m, uint64_t v) {
  uint64_t x = (m->sum ^ v) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  m->sum = x ^ (x >> 31);
}

/* What each kind of call folds first. */
enum { CALL_REGISTER = 1, CALL_FORGET, CALL_SUBMIT, CALL_FETCH, CALL_WAIT, CALL_WEIGHTS,
       CALL_DESTROY };

/* A call every rank makes alike: counted, its kind folded first. */
static void begin(tdm_mpi *m, uint64_t call) {
  m->calls++;
  fold(m, call);
}

static tdm_status await(tdm_mpi *m, coll *c) {
  pthread_mutex_lock(&m->lock);
  while (!c->done)
    pthread_cond_wait(&m->ended, &m->lock);
  tdm_status st = c->st;
  pthread_mutex_unlock(&m->lock);
  return st;
}

/* Hands a collective to the progress thread: the agreement on m's
 * checksum, or with `weights`, the gathering of `weight` into it. The
 * done ones that no one waits for are freed on the way. NULL: out of
 * memory. */
static coll *collective(tdm_mpi *m, const char *what, double weight, double *weights) {
  pthread_mutex_lock(&m->lock);
  for (coll **at = &m->colls, *c; (c = *at);) {
    if (c->done && !c->stuck) {
      *at = c->next;
      free(c);
    } else {
      at = &c->next;
    }
  }
  pthread_mutex_unlock(&m->lock);
  coll *c = calloc(1, sizeof *c);
  op *o = c ? calloc(1, sizeof *o) : NULL;
  if (!o) {
    free(c);
    return NULL;
  }
  c->gather = weights != NULL;
  c->weight = weight;
  c->weights = weights;
  c->what = what;
  c->mine[0] = m->sum;
  c->mine[1] = ~m->sum;
  c->mine[2] = m->calls;
  c->mine[3] = ~m->calls;
  c->next = m->colls;
  m->colls = c; /* (done is false: kept, whatever the sweep above) */
  o->coll = c;
  o->type = MPI_DATATYPE_NULL;
  hand_over(m, o);
  return c;
}

/* The ranks compare their checksums, with `call` and its arguments
 * folded in first (collective: every rank calls it at the same place);
 * `wait`: until they have (else in the background). TDM_ERR_DIVERGED
 * when they differ, here or earlier. */
static tdm_status agree(tdm_mpi *m, uint64_t call, uint64_t a, uint64_t b, const char *what,
                        bool wait) {
  begin(m, call);
  fold(m, a);
  fold(m, b);
  int broken = atomic_load(&m->broken);
  if (broken)
    return (tdm_status)broken;
  coll *c = collective(m, what, 0, NULL);
  if (!c)
    return TDM_ERR_NO_MEMORY;
  return wait ? await(m, c) : TDM_OK;
}

/* The ranks compare, then this rank's tasks end (when they diverged, what
 * waited on them fails, and all ends): the comparison's status first. */
static tdm_status agree_and_wait(tdm_mpi *m, uint64_t call, const char *what) {
  tdm_status agreed = agree(m, call, 0, 0, what, true);
  tdm_status st = tdm_wait_all(m->rt);
  return agreed ? agreed : st;
}

tdm_status tdm_mpi_wait_all(tdm_mpi *m) {
  return m ? agree_and_wait(m, CALL_WAIT, "tdm_mpi_wait_all") : TDM_ERR_INVALID_ARG;
}

tdm_status tdm_mpi_destroy(tdm_mpi *m) {
  if (!m)
    return TDM_OK;
  tdm_status st = agree_and_wait(m, CALL_DESTROY, "tdm_mpi_destroy");
  if (m->idle_polling) /* (no worker in it after) */
    tdm_runtime_remove_idle_fn(m->rt, idle_poll, m);
  pthread_mutex_lock(&m->lock);
  m->stop = true;
  pthread_cond_signal(&m->cond);
  pthread_mutex_unlock(&m->lock);
  pthread_join(m->thread, NULL);
  free(m->posted.ops);
  free(m->posted.reqs);
  free(m->posted.done);
  free(m->posted.stats);
  pthread_mutex_destroy(&m->poll_lock);
  pthread_cond_destroy(&m->ended);
  pthread_cond_destroy(&m->cond);
  for (coll *c = m->colls, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  pthread_mutex_destroy(&m->lock);
  for (size_t i = 0; i < m->by_handle.cap; i++) {
    dist *d = m->by_handle.slot[i];
    if (d) {
      free(d->has);
      free(d);
    }
  }
  free(m->by_handle.slot);
  free(m->by_key.slot);
  serial_enter(m->serialized);
  MPI_Comm_free(&m->comm);
  serial_leave(m->serialized);
  free(m);
  return st;
}

int tdm_mpi_rank(const tdm_mpi *m) {
  return m ? m->rank : -1;
}

int tdm_mpi_size(const tdm_mpi *m) {
  return m ? m->size : 0;
}

/* ---- distributed handles -------------------------------------------------------- */

/* Two indexes of the distributed handles (open addressing, linear
 * probing, Fibonacci hashing), one by handle and one by key, grown
 * together to twice their entries. */
static uint64_t ident(const dist *d, bool by_key) {
  return by_key ? d->key : (uint64_t)(uintptr_t)d->h;
}

static size_t home(const dindex *x, uint64_t id) {
  return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 20) & (x->cap - 1);
}

/* The slot of id in x: its entry, or the empty slot where it would go. */
static size_t slot(const dindex *x, uint64_t id, bool by_key) {
  size_t i = home(x, id);
  while (x->slot[i] && ident(x->slot[i], by_key) != id)
    i = (i + 1) & (x->cap - 1);
  return i;
}

static dist *lookup(const dindex *x, uint64_t id, bool by_key) {
  return x->cap ? x->slot[slot(x, id, by_key)] : NULL;
}

static dist *find(const tdm_mpi *m, const tdm_handle *h) {
  return lookup(&m->by_handle, (uint64_t)(uintptr_t)h, false);
}

/* x with room for n entries (the old ones moved over); -1: no memory. */
static int reserve(dindex *x, size_t n, bool by_key) {
  if (2 * n <= x->cap)
    return 0;
  dindex old = *x;
  x->cap = old.cap ? 2 * old.cap : 64;
  if (!(x->slot = calloc(x->cap, sizeof *x->slot))) {
    *x = old;
    return -1;
  }
  for (size_t i = 0; i < old.cap; i++)
    if (old.slot[i])
      x->slot[slot(x, ident(old.slot[i], by_key), by_key)] = old.slot[i];
  free(old.slot);
  return 0;
}

/* d out of x: the entries after its hole move back where their search
 * would otherwise stop short of them (no tombstones). */
static void unindex(dindex *x, const dist *d, bool by_key) {
  size_t i = slot(x, ident(d, by_key), by_key);
  x->slot[i] = NULL;
  for (size_t j = (i + 1) & (x->cap - 1); x->slot[j]; j = (j + 1) & (x->cap - 1)) {
    size_t h = home(x, ident(x->slot[j], by_key));
    bool between = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (!between) {
      x->slot[i] = x->slot[j];
      x->slot[j] = NULL;
      i = j;
    }
  }
}

tdm_status tdm_mpi_register(tdm_mpi *m, tdm_handle *h, int owner, uint64_t key) {
  tdm_buffer b;
  if (!m || !h || owner < 0 || owner >= m->size || tdm_handle_buffer(h, &b) != TDM_OK ||
      tdm_matrix_tile(h, 0, 0)) /* (partitioned: its tiles are the handles) */
    return TDM_ERR_INVALID_ARG;
  if (find(m, h) || lookup(&m->by_key, key, true))
    return TDM_ERR_INVALID_ARG; /* (declared, or its key taken) */
  /* a message's size and a row's stride are ints */
  uint64_t bytes = (uint64_t)b.nx * b.ny * b.elem_size;
  if (bytes > INT32_MAX || (uint64_t)b.ld * b.elem_size > INT32_MAX)
    return TDM_ERR_INVALID_ARG;
  dist *d = calloc(1, sizeof *d);
  uint64_t *has = d ? malloc((size_t)m->size * sizeof *has) : NULL;
  if (!has) {
    free(d);
    return TDM_ERR_NO_MEMORY;
  }
  d->h = h;
  d->key = key;
  d->owner = owner;
  d->has = has;
  for (int r = 0; r < m->size; r++)
    has[r] = r == owner ? 0 : UINT64_MAX;
  if (reserve(&m->by_handle, m->n + 1, false) || reserve(&m->by_key, m->n + 1, true)) {
    free(has);
    free(d);
    return TDM_ERR_NO_MEMORY;
  }
  m->by_handle.slot[slot(&m->by_handle, (uint64_t)(uintptr_t)h, false)] = d;
  m->by_key.slot[slot(&m->by_key, key, true)] = d;
  m->n++;
  /* (its shape and owner: ranks that declare it otherwise differ) */
  begin(m, CALL_REGISTER);
  fold(m, key);
  fold(m, (uint64_t)owner);
  fold(m, b.nx);
  fold(m, b.ny);
  fold(m, b.elem_size);
  return TDM_OK;
}

tdm_status tdm_mpi_forget(tdm_mpi *m, tdm_handle *h) {
  dist *d = m && h ? find(m, h) : NULL;
  if (!d)
    return TDM_ERR_INVALID_ARG;
  begin(m, CALL_FORGET);
  fold(m, d->key);
  unindex(&m->by_handle, d, false);
  unindex(&m->by_key, d, true);
  m->n--;
  free(d->has);
  free(d);
  return TDM_OK;
}

tdm_status tdm_mpi_forget_tiles(tdm_mpi *m, tdm_handle *matrix) {
  size_t ni, nj;
  if (!m || !matrix)
    return TDM_ERR_INVALID_ARG;
  tdm_status st = tdm_matrix_tiles(matrix, &ni, &nj);
  for (size_t i = 0; i < ni && !st; i++)
    for (size_t j = 0; j < nj && !st; j++)
      st = tdm_mpi_forget(m, tdm_matrix_tile(matrix, i, j));
  return st;
}

int tdm_mpi_owner(const tdm_mpi *m, const tdm_handle *h) {
  const dist *d = m && h ? find(m, h) : NULL;
  return d ? d->owner : -1;
}

/* ---- submission ------------------------------------------------------------------ */

/* The transfer of d's current version from rank `from` (its owner, or
 * the rank that just wrote it for its owner) to rank `to`, counted on
 * every rank; this rank's part submitted. */
static tdm_status transfer(tdm_mpi *m, dist *d, int from, int to) {
  int tag = (int)(m->seq++ % ((uint64_t)m->tag_ub + 1));
  d->has[to] = d->ver;
  if (m->rank != from && m->rank != to)
    return TDM_OK;
  bool send = m->rank == from;
  xfer_args a = {m, send ? to : from, tag, send};
  tdm_task_desc t = {.codelet = send ? &send_cl : &recv_cl, .handles = {d->h}, .args = &a,
                     .args_size = sizeof a, .flags = TDM_TASK_CPU_ONLY};
  if (send) { /* what its end needs, should it not send */
    xfer_args *kept = malloc(sizeof *kept);
    if (!kept)
      return TDM_ERR_NO_MEMORY;
    *kept = a;
    t.callback = send_ended;
    t.callback_data = kept;
    tdm_status st = tdm_submit(m->rt, &t);
    if (st)
      free(kept); /* (a refused task's callback never runs) */
    return st;
  }
  return tdm_submit(m->rt, &t);
}

static tdm_status submit_made(tdm_mpi *m, const tdm_task_desc *desc, tdm_task *made,
                              int named);

static tdm_status submit_as(tdm_mpi *m, const tdm_task_desc *desc, int named) {
  if (!m || !desc || !desc->codelet || named < -1 || named >= m->size)
    return TDM_ERR_INVALID_ARG;
  int broken = atomic_load(&m->broken);
  if (broken)
    return (tdm_status)broken;
  /* Checked alike on every rank (the runtime's own checks: made, not
   * submitted), so that every rank refuses what one refuses and their
   * counts of versions stay the same; the rank that runs it submits it. */
  tdm_task *t;
  tdm_status st = tdm_task_create(m->rt, desc, &t);
  if (st)
    return st;
  st = submit_made(m, desc, t, named);
  tdm_task_release(t);
  return st;
}

tdm_status tdm_mpi_submit(tdm_mpi *m, const tdm_task_desc *desc) {
  return submit_as(m, desc, -1);
}

tdm_status tdm_mpi_submit_on(tdm_mpi *m, const tdm_task_desc *desc, int rank) {
  return rank < 0 ? TDM_ERR_INVALID_ARG : submit_as(m, desc, rank);
}

/* tdm_mpi_submit of t, made from desc (valid for the runtime), on rank
 * `named` (-1: the owner of what it writes). */
static tdm_status submit_made(tdm_mpi *m, const tdm_task_desc *desc, tdm_task *made,
                              int named) {
  const tdm_codelet *cl = desc->codelet;
  unsigned n = cl->nbuffers;
  if (n > TDM_MAX_BUFFERS && (!cl->dyn_modes || !desc->dyn_handles))
    return TDM_ERR_INVALID_ARG;
  const tdm_access *modes = n > TDM_MAX_BUFFERS ? cl->dyn_modes : cl->modes;
  tdm_handle *const *hs = n > TDM_MAX_BUFFERS ? desc->dyn_handles : desc->handles;
  /* where it runs: the rank named, else the owner of what it writes */
  int runner = named;
  for (unsigned i = 0; i < n; i++) {
    dist *d = find(m, hs[i]);
    if (!d || modes[i] == TDM_REDUX || modes[i] == TDM_COMMUTE)
      return TDM_ERR_INVALID_ARG;
    if ((modes[i] & TDM_W) && named < 0) {
      if (runner >= 0 && runner != d->owner)
        return TDM_ERR_INVALID_ARG;
      runner = d->owner;
    }
  }
  if (runner < 0)
    runner = 0;
  /* what it is: its codelet's name (its address differs between
   * ranks), buffers, and where it runs */
  uint64_t name = 0xcbf29ce484222325ull; /* FNV-1a */
  for (const char *c = cl->name ? cl->name : ""; *c; c++)
    name = (name ^ (unsigned char)*c) * 0x100000001b3ull;
  begin(m, CALL_SUBMIT);
  fold(m, name);
  fold(m, (uint64_t)runner << 32 | n);
  for (unsigned i = 0; i < n; i++)
    fold(m, find(m, hs[i])->key ^ (uint64_t)modes[i] << 56);
  /* its inputs there, at their current version */
  tdm_status st = TDM_OK;
  for (unsigned i = 0; i < n && !st; i++) {
    unsigned j = 0; /* (a handle read through two buffers: once) */
    while (j < i && !(hs[j] == hs[i] && (modes[j] & TDM_R)))
      j++;
    if (!(modes[i] & TDM_R) || j < i)
      continue;
    dist *d = find(m, hs[i]);
    if (d->has[runner] == d->ver) {
      m->cache_hits += m->rank == runner && d->owner != runner;
      continue;
    }
    st = transfer(m, d, d->owner, runner);
  }
  if (!st && m->rank == runner)
    st = tdm_task_submit(made);
  if (st)
    return st;
  if (m->rank == runner)
    m->tasks_run++;
  else
    m->tasks_skipped++;
  /* what it writes is a new version, which only the runner holds; its
   * owner, if another rank, gets it at once */
  for (unsigned i = 0; i < n && !st; i++)
    if (modes[i] & TDM_W) {
      dist *d = find(m, hs[i]);
      unsigned j = 0;
      while (j < i && hs[j] != hs[i])
        j++;
      if (j < i && (modes[j] & TDM_W))
        continue; /* named twice: one new version */
      d->ver++;
      d->has[runner] = d->ver;
      if (runner != d->owner)
        st = transfer(m, d, runner, d->owner);
    }
  return st;
}

tdm_status tdm_mpi_fetch(tdm_mpi *m, tdm_handle *h, int rank) {
  dist *d = m && h ? find(m, h) : NULL;
  if (!d || rank < -1 || rank >= m->size)
    return TDM_ERR_INVALID_ARG;
  int broken = atomic_load(&m->broken);
  if (broken)
    return (tdm_status)broken;
  for (int r = 0; r < m->size; r++)
    if ((rank < 0 || r == rank) && d->has[r] != d->ver) {
      tdm_status st = transfer(m, d, d->owner, r);
      if (st)
        return st;
    }
  /* the ranks that wait for it first make sure the others submitted
   * alike (else its message may never come) */
  bool here = rank < 0 || rank == m->rank;
  tdm_status st = agree(m, CALL_FETCH, d->key, (uint64_t)(int64_t)rank, "tdm_mpi_fetch", here);
  if (st || !here)
    return st;
  /* this rank's memory holds it once what was submitted on it is done */
  st = tdm_handle_acquire(h, TDM_R);
  if (!st)
    st = tdm_handle_release(h);
  return st;
}

tdm_status tdm_mpi_get_counters(const tdm_mpi *m, tdm_mpi_counters *out) {
  if (!m || !out || out->struct_size < sizeof *out)
    return TDM_ERR_INVALID_ARG;
  out->sent = atomic_load(&m->sent);
  out->received = atomic_load(&m->received);
  out->bytes_sent = atomic_load(&m->bytes_sent);
  out->bytes_received = atomic_load(&m->bytes_received);
  out->cache_hits = m->cache_hits;
  out->tasks_run = m->tasks_run;
  out->tasks_skipped = m->tasks_skipped;
  out->by_workers = atomic_load(&m->by_workers);
  return TDM_OK;
}

/* ---- distributions of tiled matrices ------------------------------------------ */

void tdm_mpi_grid(int size, int *p, int *q) {
  int a = 1;
  for (int d = 1; (long)d * d <= size; d++)
    if (size % d == 0)
      a = d;
  if (p)
    *p = a;
  if (q)
    *q = size > 0 ? size / a : 0;
}

int tdm_mpi_block_cyclic(int p, int q, size_t i, size_t j) {
  if (p <= 0 || q <= 0)
    return -1;
  return (int)(i % (size_t)p) * q + (int)(j % (size_t)q);
}

/* Smooth weighted round-robin (as nginx balances upstream servers):
 * over any stretch of the numbering, each rank's count stays within one
 * of its weighted share. */
tdm_status tdm_mpi_weighted_owners(const double *weights, int nranks, size_t n, int *owners) {
  if (!weights || nranks <= 0 || (n && !owners))
    return TDM_ERR_INVALID_ARG;
  double total = 0;
  for (int r = 0; r < nranks; r++) {
    if (!(weights[r] >= 0)) /* (NaN too) */
      return TDM_ERR_INVALID_ARG;
    total += weights[r];
  }
  if (!(total > 0))
    return TDM_ERR_INVALID_ARG;
  double *credit = calloc((size_t)nranks, sizeof *credit);
  if (!credit)
    return TDM_ERR_NO_MEMORY;
  for (size_t k = 0; k < n; k++) {
    int best = 0;
    for (int r = 0; r < nranks; r++) {
      credit[r] += weights[r];
      if (credit[r] > credit[best])
        best = r;
    }
    credit[best] -= total;
    owners[k] = best;
  }
  free(credit);
  return TDM_OK;
}

tdm_status tdm_mpi_weights(tdm_mpi *m, double mine, double *all) {
  if (!m || !all)
    return TDM_ERR_INVALID_ARG;
  if (!(mine > 0))
    mine = (double)tdm_runtime_nworkers(m->rt);
  /* (through the progress thread, after the others' checks: the
   * collectives of m in one order on every rank) */
  tdm_status st = agree(m, CALL_WEIGHTS, 0, 0, "tdm_mpi_weights", true);
  coll *c = st ? NULL : collective(m, "tdm_mpi_weights", mine, all);
  if (st || !c)
    return st ? st : TDM_ERR_NO_MEMORY;
  return await(m, c);
}

tdm_status tdm_mpi_register_tiles(tdm_mpi *m, tdm_handle *matrix, const int *owners,
                                  uint64_t key_base) {
  size_t ni, nj;
  if (!m || !matrix || !owners)
    return TDM_ERR_INVALID_ARG;
  tdm_status st = tdm_matrix_tiles(matrix, &ni, &nj);
  if (st)
    return st;
  for (size_t i = 0; i < ni; i++)
    for (size_t j = 0; j < nj; j++) {
      tdm_handle *t = tdm_matrix_tile(matrix, i, j);
      if (!t)
        return TDM_ERR_NOT_PARTITIONED;
      if ((st = tdm_mpi_register(m, t, owners[i * nj + j], key_base + i * nj + j)))
        return st;
    }
  return TDM_OK;
}
