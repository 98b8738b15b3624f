/*
 * The on-disk cache of OpenCL program binaries, so that a program is
 * compiled once per machine rather than once per run.
 *
 * Where: tdm_config.cache_dir / TANDEM_CACHE_DIR, else
 * $XDG_CACHE_HOME/tandem, else $HOME/.cache/tandem; created with mode 0700
 * (the XDG base directory specification asks that of the cache home too),
 * entries with mode 0600: compiled code of the user's programs is nobody
 * else's business.
 *
 * An entry is named by a 64-bit FNV-1a hash of its key (the program's
 * source and build options, the device's name and vendor, its driver and
 * OpenCL versions, its platform), and holds the whole key, so that a hash
 * collision or a foreign file is recognised:
 *
 *   "TDMCLBIN"   8 bytes
 *   version      u32 (1)
 *   key length   u32, then the key
 *   binary size  u64, then its FNV-1a hash u64, then the binary
 *
 * An entry that is truncated, corrupt or of another version is ignored
 * with a log message and replaced after the program is built again. The
 * checksum only detects damage: it authenticates nothing. What keeps
 * another user's code out is that the directory and the entry must be
 * this user's and writable by nobody else (runtime/support/files.c), which is
 * checked on every load. Entries are written to a temporary file and
 * renamed into place, so a reader never sees half an entry. Integers are
 * in the machine's byte order: the binaries are for this machine's
 * devices anyway.
 */
#include "cl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char magic[8] = {'T', 'D', 'M', 'C', 'L', 'B', 'I', 'N'};
enum { CACHE_VERSION = 1 };

/* The entry's file name in the cache directory. */
static void entry_name(const char *key, size_t keylen, char name[32]) {
  snprintf(name, 32, "%016llx.clbin", (unsigned long long)tdm__fnv1a(key, keylen, TDM_FNV_OFFSET));
}

static bool read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n) {
    ssize_t got = read(fd, p, n);
    if (got <= 0)
      return false;
    p += got;
    n -= (size_t)got;
  }
  return true;
}

const char *tdm__cache_parse(const unsigned char *d, size_t n, const char *key, size_t keylen,
                             size_t *at, size_t *len) {
  size_t off = 0;
  char m[8];
  uint32_t version, klen;
  uint64_t bsize, bhash;
#define TAKE(dst)                                                              \
  (n - off >= sizeof(dst) && (memcpy(&(dst), d + off, sizeof(dst)), off += sizeof(dst), true))
  if (!TAKE(m) || memcmp(m, magic, sizeof m))
    return "not a Tandem cache entry";
  if (!TAKE(version) || version != CACHE_VERSION)
    return "another version";
  if (!TAKE(klen) || klen != keylen || n - off < klen)
    return "truncated, or another key";
  if (memcmp(d + off, key, keylen))
    return "another key";
  off += klen;
  if (!TAKE(bsize) || !TAKE(bhash) || bsize == 0 || bsize > n - off)
    return "truncated";
#undef TAKE
  if (bsize < n - off)
    return "bytes after the binary";
  if (tdm__fnv1a(d + off, bsize, TDM_FNV_OFFSET) != bhash)
    return "corrupt (checksum)";
  *at = off;
  *len = bsize;
  return NULL;
}

void *tdm__cache_load(tdm_runtime *rt, const char *key, size_t keylen, size_t *size) {
  int dir = tdm__cache_fd(rt);
  char path[32];
  entry_name(key, keylen, path);
  /* a binary is code: only a file nobody else could have written */
  int fd = dir < 0 ? -1 : tdm__open_trusted(rt, dir, path, "OpenCL cache");
  if (fd < 0)
    return NULL; /* not cached yet, or not to be trusted (logged) */
  struct stat st;
  unsigned char *data = NULL, *bin = NULL;
  size_t n = 0, at = 0, len = 0;
  const char *why = NULL;
  if (fstat(fd, &st) != 0 || st.st_size > TDM_CACHE_MAX_ENTRY)
    why = "larger than any entry";
  else if (!(data = tdm__malloc(rt, (n = (size_t)st.st_size) ? n : 1)) || !read_all(fd, data, n))
    why = data ? "unreadable" : "out of memory";
  else if (!(why = tdm__cache_parse(data, n, key, keylen, &at, &len)) && (bin = tdm__malloc(rt, len)))
    memcpy(bin, data + at, len);
  close(fd);
  free(data);
  if (why) {
    tdm__log(rt, TDM_LOG_WARNING, "OpenCL cache: ignoring %s: %s; the program is built again",
             path, why);
    return NULL;
  }
  if (bin)
    *size = len;
  return bin;
}

void tdm__cache_store(tdm_runtime *rt, const char *key, size_t keylen, const void *bin,
                      size_t size) {
  int dir = tdm__cache_fd(rt);
  char path[32];
  entry_name(key, keylen, path);
  tdm_outfile o;
  if (dir < 0 || !tdm__out_open(rt, &o, dir, path, 0600, TDM_LOG_WARNING, "OpenCL cache"))
    return;
  uint32_t version = CACHE_VERSION, klen = (uint32_t)keylen;
  uint64_t bsize = size, bhash = tdm__fnv1a(bin, size, TDM_FNV_OFFSET);
  fwrite(magic, sizeof magic, 1, o.f);
  fwrite(&version, sizeof version, 1, o.f);
  fwrite(&klen, sizeof klen, 1, o.f);
  fwrite(key, 1, keylen, o.f);
  fwrite(&bsize, sizeof bsize, 1, o.f);
  fwrite(&bhash, sizeof bhash, 1, o.f);
  fwrite(bin, 1, size, o.f);
  if (tdm__out_commit(rt, &o)) /* a write error is caught there, from the stream's state */
    tdm__log(rt, TDM_LOG_INFO, "OpenCL cache: wrote %s (%zu bytes)", path, size);
}
