/*
 * tandem/glib.h - Tandem in a GLib main loop (what GTK applications run),
 * in one call. Header-only: include it where GLib is used (it includes
 * <glib.h> and <glib-unix.h>; link with glib-2.0), nothing more to link.
 *
 *   guint id = tdm_glib_attach(rt, NULL);   // the default main context
 *   ...                                      // the loop runs what Tandem
 *                                            // queued for this thread
 *   g_source_remove(id);                     // before tdm_runtime_destroy
 *   tdm_runtime_destroy(rt);
 *
 * The source watches the runtime's event descriptor (tdm_runtime_event_fd)
 * and calls tdm_dispatch when it is readable, so that tasks flagged
 * TDM_TASK_MAIN_THREAD, callbacks flagged TDM_TASK_CALLBACK_ON_DISPATCH
 * and group progress with progress_on_dispatch run on the loop's thread,
 * between its other events. A context's loop must run on one thread, and
 * only one thread may dispatch a runtime: attach a runtime to one context.
 *
 * The source must be removed (g_source_remove, or g_source_destroy on
 * what tdm_glib_source_new returned) before tdm_runtime_destroy: the
 * descriptor is the runtime's. tdm_runtime_destroy itself runs what is
 * still queued, on its caller's thread.
 */
#ifndef TANDEM_GLIB_H
#define TANDEM_GLIB_H

#include <glib-unix.h>
#include <glib.h>

#include "tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The source's structure (GSource first, as GLib requires). */
typedef struct tdm_glib_source {
  GSource base;
  tdm_runtime *rt;
} tdm_glib_source;

static inline gboolean tdm_glib__dispatch(GSource *s, GSourceFunc callback, gpointer data) {
  (void)callback;
  (void)data;
  tdm_dispatch(((tdm_glib_source *)s)->rt);
  return G_SOURCE_CONTINUE;
}

/** A new source (one reference, the caller's; not attached) for rt, named
 * "tandem", at G_PRIORITY_DEFAULT; NULL when rt is NULL or its event
 * descriptor cannot be made (the runtime's log says why). Attach it with
 * g_source_attach, change its priority with g_source_set_priority. */
static inline GSource *tdm_glib_source_new(tdm_runtime *rt) {
  /* with no prepare or check function, GLib dispatches a source when one
   * of its descriptors is readable */
  static GSourceFuncs funcs = {NULL, NULL, tdm_glib__dispatch, NULL, NULL, NULL};
  int fd = rt ? tdm_runtime_event_fd(rt) : -1;
  if (fd < 0)
    return NULL;
  GSource *s = g_source_new(&funcs, sizeof(tdm_glib_source));
  ((tdm_glib_source *)s)->rt = rt;
  g_source_add_unix_fd(s, fd, G_IO_IN);
  g_source_set_name(s, "tandem");
  return s;
}

/** Attaches a new source for rt to `context` (NULL: the default main
 * context) and returns its id, or 0 where tdm_glib_source_new returns
 * NULL. The context holds the source: g_source_remove(id) (for the
 * default context) or g_source_destroy(g_main_context_find_source_by_id
 * (context, id)) removes it. */
static inline guint tdm_glib_attach(tdm_runtime *rt, GMainContext *context) {
  GSource *s = tdm_glib_source_new(rt);
  if (!s)
    return 0;
  guint id = g_source_attach(s, context);
  g_source_unref(s);
  return id;
}

#ifdef __cplusplus
}
#endif

#endif
