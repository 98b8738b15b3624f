/* Status strings and messages: the log, thread names, the message for a
 * call on a forked runtime. */
#include "support.h"
#include "../objects.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

const char *tdm_version(unsigned *major, unsigned *minor, unsigned *patch) {
  if (major)
    *major = TDM_VERSION_MAJOR;
  if (minor)
    *minor = TDM_VERSION_MINOR;
  if (patch)
    *patch = TDM_VERSION_PATCH;
  return TDM_VERSION;
}

const char *tdm_strerror(tdm_status status) {
  switch (status) {
#define XX(name, value, msg)                                                   \
  case TDM_##name:                                                             \
    return msg;
    TDM_STATUS_MAP(XX)
#undef XX
  }
  return "unknown status";
}

const char *tdm_status_name(tdm_status status) {
  switch (status) {
#define XX(name, value, msg)                                                   \
  case TDM_##name:                                                             \
    return #name;
    TDM_STATUS_MAP(XX)
#undef XX
  }
  return "UNKNOWN";
}

void tdm__vlog(tdm_log_fn fn, void *data, tdm_log_level max,
               tdm_log_level level, const char *fmt, va_list ap) {
  if (!fn || level > max)
    return;
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fn(data, level, msg);
}

/* The log where the environment asked for messages (any TANDEM_*
 * variable set) and the program installed no callback: a line each on
 * standard error, "tandem: " first, written whole by one call. */
void tdm__log_stderr(void *data, tdm_log_level level, const char *msg) {
  (void)data;
  static const char *const names[] = {"error: ", "warning: ", "", ""};
  fprintf(stderr, "tandem: %s%s\n", names[level & 3], msg);
}

void tdm__log(const tdm_runtime *rt, tdm_log_level level, const char *fmt, ...) {
  if (!rt)
    return;
  va_list ap;
  va_start(ap, fmt);
  tdm__vlog(rt->cfg.log_fn, rt->cfg.log_data, rt->cfg.log_level, level, fmt, ap);
  va_end(ap);
}

void tdm_runtime_log(const tdm_runtime *rt, tdm_log_level level, const char *fmt, ...) {
  if (!rt || !fmt)
    return;
  va_list ap;
  va_start(ap, fmt);
  tdm__vlog(rt->cfg.log_fn, rt->cfg.log_data, rt->cfg.log_level, level, fmt, ap);
  va_end(ap);
}

tdm_status tdm__refuse(const tdm_runtime *rt, tdm_status st, const char *what, const char *why) {
  tdm__log(rt, TDM_LOG_ERROR, "%s: %s", what, why);
  return st;
}

_Thread_local const tdm_runtime *tdm__thread_of TDM_TLS_MODEL;

void tdm__name_thread(const tdm_runtime *rt, const char *fmt, ...) {
  tdm__thread_of = rt;
  char name[16]; /* what the kernel keeps: 15 characters */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  int err = pthread_setname_np(pthread_self(), name);
  if (err) /* only a name: the thread works without it */
    tdm__log(rt, TDM_LOG_WARNING, "thread %s: could not be named (error %d)", name, err);
}

tdm_status tdm__forked_error(const tdm_runtime *rt, const char *what) {
  tdm__log(rt, TDM_LOG_ERROR,
           "%s: the runtime was created by process %d, and this process (%d) is a fork of "
           "it: its workers are not here; create a runtime in this process instead",
           what, (int)rt->pid, (int)getpid());
  return TDM_ERR_FORKED;
}
