/*
 * The support layer, the runtime's floor: messages and logging, the
 * allocation seam, injected faults, the clock, files and what the cache
 * trusts, configuration text, small containers. It calls nothing above
 * it; a runtime it is given is read through runtime/objects.h, never
 * called into.
 */
#ifndef TDM_SUPPORT_H
#define TDM_SUPPORT_H

#include "tandem.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "deque.h"
#include "spinlock.h"


/* A helper split out of a hot function for reading, kept inlined. */
#if defined(__GNUC__)
#define TDM_ALWAYS_INLINE __attribute__((always_inline)) inline
#define TDM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TDM_LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define TDM_ALWAYS_INLINE inline
#define TDM_UNLIKELY(x) (x)
#endif

/* Thread-local variables of the runtime are initial-exec: in the static
 * TLS block, read with one instruction instead of a call to
 * __tls_get_addr (the default for shared libraries); they are asked on
 * every submit and completion. A library that is dlopen()ed may still
 * use them: glibc keeps room in the static block for such small
 * variables. */
#if defined(__GNUC__)
#define TDM_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define TDM_TLS_MODEL
#endif

/* ---- task arrays (util.c) ------------------------------------------------ */

/* A growable array of task references (inline room for two). */
typedef struct tdm_taskvec {
  struct tdm_task **items;
  unsigned n, cap;
  struct tdm_task *inline_items[2];
} tdm_taskvec;

void tdm__taskvec_init(tdm_taskvec *v);
int tdm__taskvec_push(tdm_runtime *rt, tdm_taskvec *v, struct tdm_task *t);
void tdm__taskvec_free(tdm_taskvec *v);
/* Moves src's contents to dst (which must be empty); src becomes empty. */
void tdm__taskvec_move(tdm_taskvec *dst, tdm_taskvec *src);
/* Makes v's capacity at least cap, its items kept (-1: out of memory). */
int tdm__taskvec_reserve(tdm_runtime *rt, tdm_taskvec *v, unsigned cap);

/* ---- memory (alloc.c) ---------------------------------------------------- */

/* The allocations a running runtime makes go through these, so that tests
 * can make one of them fail (tdm__fail_allocation) and check that every
 * call then reports TDM_ERR_NO_MEMORY cleanly, as SQLite's fault-injection
 * seams do. */
void *tdm__malloc(tdm_runtime *rt, size_t size);
void *tdm__calloc(tdm_runtime *rt, size_t n, size_t size);
void *tdm__realloc(tdm_runtime *rt, void *p, size_t size);
void *tdm__aligned_alloc(tdm_runtime *rt, size_t align, size_t size);
/* Zeroed memory aligned to `align` (a power of two), for structs with
 * _Alignas members (calloc promises 16 bytes only); free() frees it. Not
 * a fault-injection seam: the runtime and its workers are made with it. */
void *tdm__zalloc_aligned(size_t align, size_t size);
/* Test seam: the allocation after the next `n` ones fails (n = 0: the next
 * one); a negative n disarms. */
void tdm__fail_allocation(tdm_runtime *rt, long n);

/* ---- injected faults (faults.c) ------------------------------------------ */

/* Device faults, injected where a backend launches a task and where it
 * learns that the task's commands completed (the task fails there as if
 * the device had reported an error), where it copies between a device
 * and the host (the copy is started and completes with an error, its
 * bytes not landed, as a device reports it through the copy's event),
 * and where the memory module allocates a buffer on a device (none is
 * made, as when the device is out of memory); and where a try that the
 * watchdog watches starts (its completion never comes: a hung device,
 * see core/watchdog.c). */
enum {
  TDM_FAULT_LAUNCH,
  TDM_FAULT_COMPLETE,
  TDM_FAULT_COPY,
  TDM_FAULT_ALLOC,
  TDM_FAULT_HANG,
  TDM_NFAULTS
};
#define TDM_MAX_LOST 8 /* device=D:lost_at=T terms of tdm_config.faults */

/* A runtime's injected faults (rt->faults). */
typedef struct tdm_faults {
  _Atomic long alloc_countdown; /* see tdm__fail_allocation; -1: off */
  /* see tdm__fault: the probabilities as fractions of 2^32 (0: off) */
  _Atomic uint32_t p[TDM_NFAULTS];
  _Atomic uint64_t draws;
  uint64_t nth[TDM_NFAULTS]; /* 0: off; else every nth fails */
  _Atomic uint64_t count[TDM_NFAULTS];
  _Atomic uint64_t injected; /* every kind, for tests */
  /* Devices (records) made to stop working at a time after creation, or
   * at their `after`th launch (0: by time). */
  struct {
    unsigned device;
    uint64_t at_ns, after;
    _Atomic uint64_t launches;
  } lost[TDM_MAX_LOST];
  unsigned nlost;
  _Atomic uint64_t lost_said; /* bit i: lost[i] was logged */
} tdm_faults;

/* Test seam: from now on each operation of that kind fails with
 * probability p (0 disarms), drawn from a sequence seeded with seed. */
void tdm__faults_set(tdm_runtime *rt, unsigned kind, double p, uint64_t seed);
/* Whether this operation of that kind on device worker k fails: TDM_OK,
 * TDM_ERR_SYSTEM (injected), or TDM_ERR_DEVICE_LOST (its device was made
 * to stop working, or is hung); logged. */
tdm_status tdm__fault(tdm_runtime *rt, unsigned kind, unsigned k);
/* Arms the faults tdm_config.faults describes (NULL: none): TDM_OK, or
 * TDM_ERR_INVALID_ARG with a message naming the bad term. */
tdm_status tdm__faults_parse(tdm_runtime *rt, const char *spec);

/* ---- hashing and statistics (util.c) -------------------------------------- */

/* FNV-1a over n bytes, continuing from h (TDM_FNV_OFFSET to start). */
#define TDM_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t tdm__fnv1a(const void *data, size_t n, uint64_t h);
/* The median of v[0 .. n-1], n > 0; sorts v. */
double tdm__median(double *v, unsigned n);

/* ---- files (files.c: what is trusted and how files are written) ------- */

/* Tandem's cache directory (compiled programs, performance models), open,
 * or -1 when there is none to use: tdm_config.cache_dir, else
 * $XDG_CACHE_HOME/tandem, else $HOME/.cache/tandem, created (mode 0700)
 * if missing, and used only if it belongs to this user and no one else
 * may write to it (else logged once). Opened on first use, kept until
 * destroy (tdm__cache_close). */
int tdm__cache_fd(tdm_runtime *rt);
/* The cache directory's path, malloc'd: `dir` (tdm_config.cache_dir) when
 * set, else $XDG_CACHE_HOME/tandem, else $HOME/.cache/tandem; NULL when
 * none. */
char *tdm__cache_path(const char *dir);
void tdm__cache_close(tdm_runtime *rt);
/* Opens `name` (relative to dirfd) for reading if nobody but this user
 * could have written it: a regular file, not a link, owned by this user,
 * not writable by group or others. -1 when it is missing (quietly) or
 * untrusted (logged, `what` naming the file's use). rt may be NULL. */
int tdm__open_trusted(const tdm_runtime *rt, int dirfd, const char *name, const char *what);

/* A file being written: a new file under a unique name beside its final
 * name, renamed over it by tdm__out_commit. */
typedef struct tdm_outfile {
  FILE *f;             /* write the contents here */
  int dirfd;           /* the directory the file goes in */
  bool own_dir;        /* dirfd was opened for this file */
  tdm_log_level level; /* of the messages on failure */
  const char *what;
  char *name;          /* final name, in dirfd */
  char tmp[256];       /* temporary name, in dirfd; empty when none */
} tdm_outfile;
/* Starts writing `path` (relative to dirfd: AT_FDCWD for a path of the
 * user's). The temporary file is created with O_EXCL | O_NOFOLLOW and
 * `mode` (less the umask); a final name that exists and is not a regular
 * file (a link, a device, a directory) is refused. False, logged at
 * `level` with `what`, on failure. rt may be NULL. */
bool tdm__out_open(const tdm_runtime *rt, tdm_outfile *o, int dirfd, const char *path,
                   mode_t mode, tdm_log_level level, const char *what);
/* Closes the file and renames it into place; false (logged, the temporary
 * file removed, the old file left) on any write error. */
bool tdm__out_commit(const tdm_runtime *rt, tdm_outfile *o);
/* Gives up: closes and removes the temporary file. */
void tdm__out_abort(tdm_outfile *o);

/* ---- configuration text (parse.c) ---------------------------------------- */

/* A count: decimal digits and nothing
 * else (no sign, no space), at most max. Bytes: the same with an optional
 * k, M or G suffix (powers of 1024), at most max in all. */
bool tdm__parse_count(const char *s, uint64_t max, uint64_t *out);
bool tdm__parse_bytes(const char *s, uint64_t max, uint64_t *out);
/* A time: a number from 0 with the unit s, ms or us, at most max seconds,
 * into *out (seconds). */
bool tdm__parse_seconds(const char *s, double max, double *out);

/* The largest device memory limit taken (tdm_config.device_memory_limit,
 * TANDEM_DEVICE_MEMORY_LIMIT): 1 PiB, beyond any device. */
#define TDM_MAX_MEMORY_LIMIT (UINT64_C(1) << 50)

/* Seconds to nanoseconds, saturating (negative or NaN: 0; beyond about
 * 146 years: that), so that modelled times never overflow a conversion. */
static inline uint64_t tdm__ns_of(double seconds) {
  const double most = 4.6e18;
  double ns = seconds * 1e9;
  return ns > 0 ? (ns < most ? (uint64_t)ns : (uint64_t)most) : 0;
}

/* ---- fork (log.c) --------------------------------------------------------- */

/* fork()s seen by this process: a handler registered with pthread_atfork
 * at the first tdm_runtime_create adds one in each child. A runtime whose
 * fork_generation differs was made by a parent: its threads do not exist
 * here, so every call on it fails with TDM_ERR_FORKED rather than wait
 * for them. Process-wide by nature: fork is. */
extern _Atomic unsigned tdm__fork_generation;
/* relaxed: written once, in the child, before any other thread exists */
#define tdm__forked(rt)                                                        \
  (atomic_load_explicit(&tdm__fork_generation, memory_order_relaxed) !=        \
   (rt)->fork_generation)
/* Logs that `what` was called on a parent's runtime; TDM_ERR_FORKED. */
tdm_status tdm__forked_error(const tdm_runtime *rt, const char *what);
#define TDM_FORK_GUARD(rt, what)                                               \
  do {                                                                         \
    if (tdm__forked(rt))                                                       \
      return tdm__forked_error((rt), (what));                                  \
  } while (0)

/* ---- messages (log.c) ----------------------------------------------------- */

void tdm__log(const tdm_runtime *rt, tdm_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tdm__log_stderr(void *data, tdm_log_level level, const char *msg);
void tdm__vlog(tdm_log_fn fn, void *data, tdm_log_level max,
               tdm_log_level level, const char *fmt, va_list ap);

/* Names the calling thread, one that rt started (printf-style, cut to 15
 * characters: what `top -H`, `perf` and debuggers show, e.g.
 * "tandem-cpu3"; a failure is logged as a warning), and records it as
 * rt's in tdm__thread_of: a task or callback run there is the runtime's
 * code, whatever thread (worker, device, watcher) it is. */
void tdm__name_thread(const tdm_runtime *rt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
extern _Thread_local const tdm_runtime *tdm__thread_of TDM_TLS_MODEL;

/* Calls a pthread function whose failure can only come from a bug (an
 * invalid or corrupted object): logs it, and goes on. */
#define TDM_PTHREAD(rt, call)                                                  \
  do {                                                                         \
    int tdm__err = (call);                                                     \
    if (tdm__err)                                                              \
      tdm__log((rt), TDM_LOG_ERROR, "%s failed: error %d (%s:%d)", #call,      \
               tdm__err, __FILE__, __LINE__);                                  \
  } while (0)

/* A name for messages: s, or "(unnamed)" when it is NULL. */
static inline const char *tdm__name_or(const char *s) {
  return s && *s ? s : "(unnamed)";
}

/* Logs "what: why" as an error and returns st. */
tdm_status tdm__refuse(const tdm_runtime *rt, tdm_status st, const char *what, const char *why);

/* ---- the clock (clock.c) ------------------------------------------------- */

/* CLOCK_MONOTONIC, in nanoseconds. */
uint64_t tdm__now_ns(void);
/* Sleeps the calling thread until tdm__now_ns() reaches `until`. */
void tdm__sleep_until(uint64_t until);

#endif
