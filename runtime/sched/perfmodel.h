/*
 * Performance models: how long a codelet takes, by data size and kind of
 * worker, learnt from the durations observed (perfmodel.c).
 *
 * Per (codelet, worker class) the model keeps, for each data size seen,
 * the last observations; its estimate at that size is their median, so a
 * single spike (a page fault storm, a preempted thread) moves it by one
 * rank and never poisons it. For a size not yet seen, between sizes it
 * has, it fits a power law time = a * size^b through them (least squares
 * on the logarithms, as StarPU's non-linear regression models do), its
 * estimate kept within the times seen at them. A model is "calibrated"
 * for a size once it has seen it CALIBRATION times, or, by the
 * regression, once two sizes around it are.
 *
 * Models persist as text files, written whole to a temporary file and
 * renamed (atomic); a file that is truncated, corrupt (checksum), of
 * another version or not a model at all is ignored with a log message and
 * calibration starts again.
 */
#ifndef TDM_PERFMODEL_H
#define TDM_PERFMODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tandem.h"

#define TDM_MODEL_CALIBRATION 3 /* observations before a size is trusted */
#define TDM_MODEL_WINDOW 15     /* observations kept per size */
#define TDM_MODEL_NAME_MAX 1024 /* bytes of a codelet or class name kept */
#define TDM_MODEL_MAX_SECONDS 1e6 /* a duration read beyond this: a bad file */

typedef struct tdm_perfmodel tdm_perfmodel;

tdm_perfmodel *tdm__model_new(void);
void tdm__model_free(tdm_perfmodel *m);

/* Records that `codelet` on data of `size` bytes took `seconds` on a
 * worker of class `cls`. Returns false when out of memory (the
 * observation is lost). */
bool tdm__model_observe(tdm_perfmodel *m, const char *codelet, uint64_t size, const char *cls,
                        double seconds);

/* The expected duration in seconds, or a negative number when the model
 * knows nothing yet; *calibrated (may be NULL) says whether it is to be
 * trusted. */
double tdm__model_predict(const tdm_perfmodel *m, const char *codelet, uint64_t size,
                          const char *cls, bool *calibrated);

/* For work proportional to its size (the chunks of a data-parallel
 * operation: size in elements): the time per unit of size over the
 * observations kept at every size (the sum of their times over the sum
 * of their sizes), times `size`; calibrated once TDM_MODEL_CALIBRATION
 * observations are kept in all. */
double tdm__model_predict_linear(const tdm_perfmodel *m, const char *codelet, uint64_t size,
                                 const char *cls, bool *calibrated);
/* Records such work: kept at the power of two at or below `size` (work
 * of every size is cut: one record per size would grow without end), as
 * its time per unit of size times that power's. */
bool tdm__model_observe_linear(tdm_perfmodel *m, const char *codelet, uint64_t size,
                               const char *cls, double seconds);
/* Saves to / loads from the file `name` relative to dirfd (AT_FDCWD for
 * a path), read only if nobody else could have written it (files.c).
 * Load replaces the model's contents; on a bad file it leaves the model
 * empty, logs why (rt may be NULL) and returns TDM_ERR_INVALID_ARG; a
 * missing or untrusted file is TDM_ERR_SYSTEM (logged when untrusted).
 * Save merges with the file as it is now, under a lock (name + ".lock"),
 * so that concurrent processes lose none of each other's records: the
 * windows m added to since it was loaded win, the file's other records
 * are kept, and those removed from the file since m was loaded (a reset)
 * are not written back unless m measured them again. It returns TDM_OK
 * or TDM_ERR_SYSTEM (logged). */
tdm_status tdm__model_save(tdm_perfmodel *m, int dirfd, const char *name, const tdm_runtime *rt);
tdm_status tdm__model_load(tdm_perfmodel *m, int dirfd, const char *name, const tdm_runtime *rt);
/* Model files are per application: TDM_MODEL_PREFIX + its name +
 * TDM_MODEL_SUFFIX in the cache directory. */
#define TDM_MODEL_PREFIX "perfmodel-v1-"
#define TDM_MODEL_SUFFIX ".txt"
#define TDM_MODEL_APP_MAX 64 /* bytes of an application's name kept */
/* The file name of `app`'s models (NULL: the program's name), malloc'd
 * into *out: TDM_OK or TDM_ERR_NO_MEMORY (logged; rt may be NULL). */
tdm_status tdm__model_file(const tdm_runtime *rt, const char *app, char **out);
/* Each record of m, oldest window entry first in seen[0..k); stops when
 * fn returns false. */
typedef bool (*tdm_model_record_fn)(void *data, const char *codelet, const char *cls,
                                    uint64_t size, unsigned k, const double *seen);
void tdm__model_each(const tdm_perfmodel *m, tdm_model_record_fn fn, void *data);
/* The power law time = c * size^b fitted through the calibrated sizes of
 * (codelet, cls); false when fewer than two sizes are calibrated. */
bool tdm__model_law(const tdm_perfmodel *m, const char *codelet, const char *cls, double *c,
                    double *b);
/* Whether a model's name is that of `codelet`: the name itself, or the
 * name with a footprint ("NAME#FOOTPRINT", core/place.c), unless the
 * name asked for has a footprint itself. */
bool tdm__model_named(const char *model, const char *codelet);
/* Removes `codelet`'s records (NULL: all; a name without a footprint:
 * those of every footprint of it too) from the file `name` in dirfd,
 * under the writers' lock, counting them into *removed; the file goes
 * when nothing is left. TDM_OK, or TDM_ERR_SYSTEM (logged). */
tdm_status tdm__model_forget(int dirfd, const char *name, const char *codelet,
                             const tdm_runtime *rt, unsigned *removed);
/* The parser under tdm__model_load: the model from f, or what is wrong
 * with it (the model then left empty). */
const char *tdm__model_parse(tdm_perfmodel *m, FILE *f);

/* A link between the host and a device: time = latency + bytes /
 * bandwidth, learnt from the copies made. The fit is Theil-Sen's (Theil
 * 1950, Sen 1968: the median of the slopes between pairs of
 * observations, then the median intercept), which a few outliers do not
 * move; until two sizes have been seen, the declared values hold. */
#define TDM_LINK_WINDOW 32

typedef struct tdm_link_model {
  double declared_latency, declared_bandwidth; /* s, bytes/s; 0: unknown */
  unsigned n;
  double bytes[TDM_LINK_WINDOW], seconds[TDM_LINK_WINDOW];
} tdm_link_model;

void tdm__link_observe(tdm_link_model *l, uint64_t bytes, double seconds);
/* The current estimate; false when there is none (nothing declared, too
 * little seen). */
bool tdm__link_estimate(const tdm_link_model *l, double *latency, double *bandwidth);
/* Predicted seconds for a copy of `bytes`, or a negative number. */
double tdm__link_predict(const tdm_link_model *l, uint64_t bytes);

#endif
