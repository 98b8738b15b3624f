/*
 * Files: every file Tandem reads from its cache or writes anywhere goes
 * through here, so that another local user can neither feed it code nor
 * make it write through a link.
 *
 * The cache directory holds compiled OpenCL programs (code that runs in
 * the process) and performance models (which steer placement). A file
 * there is trusted only if nobody but this user could have written it:
 *  - the directory is opened once per runtime and checked on the open
 *    descriptor (fstat, as OpenSSH checks ~/.ssh): a directory, owned by
 *    the effective user, not writable by group or others. Otherwise the
 *    runtime warns once and runs without a cache. Every later access is
 *    relative to that descriptor (openat), so renaming or replacing the
 *    path afterwards changes nothing.
 *  - a file is opened with O_NOFOLLOW (a symbolic link is refused, not
 *    followed) and O_NONBLOCK (a planted FIFO cannot block the open), then
 *    checked on its descriptor: a regular file, owned by this user, not
 *    writable by group or others.
 *
 * Writing, in the cache or at a path of the user's (trace, graph): the
 * contents go to a new file with a unique name in the same directory
 * (O_CREAT | O_EXCL | O_NOFOLLOW: it cannot be a planted file or link),
 * which is then renamed over the final name. rename() replaces a link at
 * the final name rather than following it, readers see the old file or
 * the new one whole, and concurrent writers never share a temporary file.
 * A final name that exists and is not a regular file (a link, a device
 * such as /dev/null, a directory) is refused: replacing it is never what
 * the user meant.
 */
#include "support.h"
#include "../objects.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TDM_SHOWN_PATH 320 /* bytes of a path shown in a message, at most */
static const char *shown(const char *path, char buf[TDM_SHOWN_PATH]);

/* Makes dir and its missing parents, mode 0700. */
static bool make_dirs(const tdm_runtime *rt, const char *dir) {
  char *path = strdup(dir);
  if (!path)
    return false;
  bool ok = true;
  for (char *p = path + 1; ok; p++) {
    if (*p != '/' && *p != 0)
      continue;
    char c = *p;
    *p = 0;
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
      char buf[TDM_SHOWN_PATH];
      tdm__log(rt, TDM_LOG_WARNING, "cache: cannot create %s: %s; running without a cache",
               shown(path, buf), strerror(errno));
      ok = false;
    }
    *p = c;
    if (!c)
      break;
  }
  free(path);
  return ok;
}

/* Why the file or directory behind fd cannot be trusted, or NULL. */
static const char *untrusted(int fd, mode_t type, char *why, size_t size) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    snprintf(why, size, "fstat: %s", strerror(errno));
  else if ((st.st_mode & S_IFMT) != type)
    snprintf(why, size, "not a %s", type == S_IFDIR ? "directory" : "regular file");
  else if (st.st_uid != geteuid())
    snprintf(why, size, "owned by uid %u, not by this user (uid %u)", (unsigned)st.st_uid,
             (unsigned)geteuid());
  else if (st.st_mode & (S_IWGRP | S_IWOTH))
    snprintf(why, size, "writable by %s (mode %03o)",
             st.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st.st_mode & 0777));
  else
    return NULL;
  return why;
}

char *tdm__cache_path(const char *dir) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  const char *base = dir && *dir ? dir : xdg && xdg[0] == '/' ? xdg : home && *home ? home : NULL;
  const char *tail = dir && *dir ? "" : xdg && xdg[0] == '/' ? "/tandem" : "/.cache/tandem";
  if (!base)
    return NULL;
  size_t n = strlen(base) + strlen(tail) + 1;
  char *path = malloc(n);
  if (path)
    snprintf(path, n, "%s%s", base, tail);
  return path;
}

/* path, or its start and end around "...", to fit a log message */
static const char *shown(const char *path, char buf[TDM_SHOWN_PATH]) {
  size_t n = strlen(path);
  if (n < TDM_SHOWN_PATH)
    return path;
  const size_t half = TDM_SHOWN_PATH / 2 - 2; /* half + 3 + half + 1 fit */
  memcpy(buf, path, half);
  memcpy(buf + half, "...", 3);
  memcpy(buf + half + 3, path + n - half, half + 1); /* with the final NUL */
  return buf;
}

static int open_cache(const tdm_runtime *rt) {
  char *path = tdm__cache_path(rt->cfg.cache_dir), buf[TDM_SHOWN_PATH];
  if (!path) {
    tdm__log(rt, TDM_LOG_INFO, "cache: no cache directory (HOME is not set)");
    return -1;
  }
  int fd = -1;
  if (make_dirs(rt, path)) {
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char why[128];
    if (fd < 0) {
      tdm__log(rt, TDM_LOG_WARNING, "cache: cannot open %s: %s; running without a cache",
               shown(path, buf), strerror(errno));
    } else if (untrusted(fd, S_IFDIR, why, sizeof why)) {
      tdm__log(rt, TDM_LOG_WARNING,
               "cache: not using %s: %s; running without a cache (another user could plant "
               "compiled code there)",
               shown(path, buf), why);
      close(fd);
      fd = -1;
    }
  }
  free(path);
  return fd;
}

int tdm__cache_fd(tdm_runtime *rt) {
  TDM_PTHREAD(rt, pthread_mutex_lock(&rt->cache_lock));
  if (!rt->cache_tried) {
    rt->cache_fd = open_cache(rt);
    rt->cache_tried = true;
  }
  int fd = rt->cache_fd;
  TDM_PTHREAD(rt, pthread_mutex_unlock(&rt->cache_lock));
  return fd;
}

void tdm__cache_close(tdm_runtime *rt) {
  if (rt->cache_tried && rt->cache_fd >= 0)
    close(rt->cache_fd);
  rt->cache_fd = -1;
  rt->cache_tried = false;
}

int tdm__open_trusted(const tdm_runtime *rt, int dirfd, const char *name, const char *what) {
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  char why[128];
  if (fd < 0) {
    if (errno != ENOENT)
      tdm__log(rt, TDM_LOG_WARNING, "%s: not reading %s: %s", what, name,
               errno == ELOOP ? "a symbolic link" : strerror(errno));
    return -1;
  }
  if (untrusted(fd, S_IFREG, why, sizeof why)) {
    tdm__log(rt, TDM_LOG_WARNING, "%s: not reading %s: %s", what, name, why);
    close(fd);
    return -1;
  }
  /* reads block again: O_NONBLOCK was only for the open */
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    tdm__log(rt, TDM_LOG_WARNING, "%s: not reading %s: fcntl: %s", what, name, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

/* 64 unpredictable bits for a temporary name; the clock and a counter
 * where getrandom is unavailable (O_EXCL still prevents any clash). */
static uint64_t name_bits(void) {
  uint64_t r;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r)
    return r;
  static _Atomic uint64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  /* relaxed: only uniqueness within the process matters */
  uint64_t c = atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
  return ((uint64_t)ts.tv_nsec << 20) ^ ((uint64_t)getpid() << 40) ^ c ^ (uint64_t)ts.tv_sec;
}

bool tdm__out_open(const tdm_runtime *rt, tdm_outfile *o, int dirfd, const char *path,
                   mode_t mode, tdm_log_level level, const char *what) {
  memset(o, 0, sizeof *o);
  o->dirfd = -1;
  o->what = what;
  o->level = level;
  char buf[TDM_SHOWN_PATH];
  const char *p = shown(path, buf);
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
    tdm__log(rt, level, "%s: cannot write %s: not a file name", what, p);
    return false;
  }
  if (strlen(base) > NAME_MAX) { /* the temporary name, cut, would not say */
    tdm__log(rt, level, "%s: cannot write %s: %s", what, p, strerror(ENAMETOOLONG));
    return false;
  }
  o->name = strdup(base);
  if (!o->name) {
    tdm__log(rt, level, "%s: cannot write %s: out of memory", what, p);
    return false;
  }
  if (slash) { /* the directory opened once: the rename goes where the file was made */
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = strndup(path, n);
    o->dirfd = dir ? openat(dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (o->dirfd < 0)
      tdm__log(rt, level, "%s: cannot write %s: %s", what, p,
               dir ? strerror(errno) : "out of memory");
    free(dir);
    if (o->dirfd < 0) {
      tdm__out_abort(o);
      return false;
    }
    o->own_dir = true;
  } else {
    o->dirfd = dirfd;
  }
  struct stat st;
  if (fstatat(o->dirfd, o->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
    tdm__log(rt, level, "%s: refusing to write %s: it exists and is %s", what, p,
             S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file");
    tdm__out_abort(o);
    return false;
  }
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 64; tries++) {
    snprintf(o->tmp, sizeof o->tmp, ".%.200s.%016llx.tmp", o->name,
             (unsigned long long)name_bits());
    fd = openat(o->dirfd, o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  if (fd < 0 || !(o->f = fdopen(fd, "w"))) {
    tdm__log(rt, level, "%s: cannot write %s: %s", what, p, strerror(errno));
    if (fd >= 0) {
      close(fd);
      unlinkat(o->dirfd, o->tmp, 0);
    }
    o->tmp[0] = 0;
    tdm__out_abort(o);
    return false;
  }
  return true;
}

void tdm__out_abort(tdm_outfile *o) {
  if (o->f)
    fclose(o->f);
  if (o->tmp[0])
    unlinkat(o->dirfd, o->tmp, 0);
  if (o->own_dir && o->dirfd >= 0)
    close(o->dirfd);
  free(o->name);
  memset(o, 0, sizeof *o);
  o->dirfd = -1;
}

bool tdm__out_commit(const tdm_runtime *rt, tdm_outfile *o) {
  bool ok = !ferror(o->f);
  int err = ok ? 0 : EIO;
  if (fclose(o->f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  o->f = NULL;
  if (ok && renameat(o->dirfd, o->tmp, o->dirfd, o->name) != 0) {
    ok = false;
    err = errno;
  }
  if (ok)
    o->tmp[0] = 0; /* renamed: nothing to remove */
  else
    tdm__log(rt, o->level, "%s: cannot write %s: %s", o->what, o->name, strerror(err));
  tdm__out_abort(o);
  return ok;
}
