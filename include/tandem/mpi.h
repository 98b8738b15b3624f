/*
 * tandem/mpi.h - one Tandem program on several machines, over MPI.
 * Link with libtandem-mpi (and MPI); desktop programs never need either.
 *
 * The model is the sequential task flow over ranks (as StarPU-MPI's):
 * every rank registers the same handles, each with the rank that owns its
 * data, and submits the same tasks in the same order. A task runs on the
 * rank that owns the data it writes; the other ranks skip it but keep
 * the bookkeeping of versions, so that data moves where it is needed:
 * an input owned elsewhere is received (MPI_Irecv) from its owner, who
 * sends it (MPI_Isend) once the version is ready, and the copy received
 * is kept and used again until the owner writes a new version. Messages
 * are asynchronous: a transfer is a task of the graph, which ends when
 * its request completes, so computation and communication overlap.
 *
 *   int level;
 *   MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
 *   tdm_runtime *rt;  tdm_runtime_create(NULL, &rt);
 *   tdm_mpi *m;       tdm_mpi_create(rt, MPI_COMM_WORLD, &m);
 *   tdm_handle *a[N]; ...register each on every rank...
 *   for (i...) tdm_mpi_register(m, a[i], i % size, i);   // owner, key
 *   tdm_mpi_submit(m, &(tdm_task_desc){.codelet = &cl, .handles = {a[0], a[1]}});
 *   tdm_mpi_wait_all(m);
 *   tdm_mpi_destroy(m);  tdm_runtime_destroy(rt);  MPI_Finalize();
 *
 * The application owns MPI: it calls MPI_Init_thread with
 * MPI_THREAD_MULTIPLE or MPI_THREAD_SERIALIZED (Tandem makes its MPI
 * calls from one thread of its own per tdm_mpi, the progress thread;
 * with SERIALIZED, the tdm_mpi of a process take turns, and the
 * application must not call MPI while one exists, except through these
 * functions), and MPI_Finalize after tdm_mpi_destroy. A tdm_mpi takes one
 * of its runtime's idle functions (tdm_runtime_add_idle_fn; with none
 * left, only its progress thread tests the messages, and it logs a
 * warning).
 *
 * Failures: a task that fails or is cancelled on the rank that runs it
 * makes what it writes lost there, as on one machine; a rank that then
 * needs that version is told (its receive fails the same way), so its
 * readers are cancelled and its tdm_mpi_wait_all and acquisitions report
 * it, rather than waiting for a message that will not come. A task
 * description that the runtime refuses is refused on every rank. Tandem works on a duplicate of the communicator it is
 * given: several tdm_mpi (several runtimes, several communicators) work
 * side by side. The calls on one tdm_mpi are made from one thread at a
 * time (the order of its submissions is the program's). Several tdm_mpi
 * driven by different threads need a runtime each: tdm_mpi_wait_all
 * waits for every task of the runtime, and one thread's wait would then
 * hang on the other's tasks, whose messages wait for that thread's
 * next call on the other ranks.
 *
 * Progress: the progress thread sleeps while no message is in flight
 * (no CPU used), and while some are, tests them at intervals that double
 * from 2 us to 512 us as long as none completes: a completion is seen
 * within 512 us, and within a few microseconds while messages complete
 * one after another. Meanwhile the runtime's idle CPU workers test them
 * too, in the tdm_config.spin_us before they park
 * (tdm_runtime_add_idle_fn), one at a time: a rank whose workers wait
 * for a message sees it at once.
 *
 * Ranks that differ: each rank keeps a checksum of the calls that every
 * rank makes alike (each declaration with its owner and shape, each
 * submission with its codelet's name, handles, modes and rank, each
 * fetch and wait), and the ranks compare theirs (a non-blocking
 * MPI_Iallreduce) at tdm_mpi_wait_all, tdm_mpi_fetch, tdm_mpi_weights
 * and tdm_mpi_destroy. When they differ, TDM_ERR_DIVERGED is returned
 * by tdm_mpi_wait_all, tdm_mpi_weights and tdm_mpi_destroy on every rank,
 * and by tdm_mpi_fetch on the ranks that get the handle (the others do
 * not wait for the comparison: their next call returns it); the error
 * is logged (tdm_config.log_fn, with each rank's count of calls), messages
 * in flight are given up (so what waited on them is cancelled: nothing
 * waits forever), and m refuses submissions and fetches from then on:
 * destroy it; its distributed data cannot be trusted. A message that
 * does not fit the memory it lands in (a handle declared with another
 * shape on its sender) fails its receive with TDM_ERR_DIVERGED at once,
 * so its readers never run on it. What a comparison cannot see: the
 * codelets' arguments, and calls made after the last comparison until
 * the next.
 *
 * Not supported yet: fault tolerance across ranks (a rank that dies
 * ends the run), TDM_REDUX and TDM_COMMUTE on distributed handles.
 */
#ifndef TANDEM_MPI_H
#define TANDEM_MPI_H

#include <mpi.h>

#include "tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_mpi tdm_mpi;

/**
 * Makes rt work with the other ranks of comm (duplicated: comm may be
 * freed after). Collective over comm. TDM_ERR_INVALID_ARG: NULL
 * arguments, MPI not initialised or already finalized, or initialised
 * below MPI_THREAD_SERIALIZED (MPI_Query_thread tells the level);
 * TDM_ERR_SYSTEM: an MPI call failed or the progress thread could not
 * start.
 */
TDM_API tdm_status tdm_mpi_create(tdm_runtime *rt, MPI_Comm comm, tdm_mpi **out);

/**
 * Ends m: waits for its tasks and messages (tdm_mpi_wait_all: its status,
 * TDM_ERR_DIVERGED included), stops its progress thread, frees the
 * copies received and the duplicate communicator. Collective over the
 * communicator. The runtime and its handles stay; unregister the handles
 * (each rank its own) after. NULL is accepted.
 */
TDM_API tdm_status tdm_mpi_destroy(tdm_mpi *m);

/** This rank, and the ranks, of m's communicator. */
TDM_API int tdm_mpi_rank(const tdm_mpi *m);
TDM_API int tdm_mpi_size(const tdm_mpi *m);

/**
 * Declares h (a handle of m's runtime, registered on every rank with the
 * same shape) distributed: `owner` holds its data (its memory on the
 * other ranks is only where received copies may land: never read as
 * the data), `key` names it across ranks (unique in m, the same on every
 * rank). Every rank declares every handle, in the same order, before a
 * task names it. TDM_ERR_INVALID_ARG: owner out of range, a key or
 * handle declared twice, a partitioned handle (its tiles are declared:
 * tdm_mpi_register_tiles); TDM_ERR_NO_MEMORY.
 */
TDM_API tdm_status tdm_mpi_register(tdm_mpi *m, tdm_handle *h, int owner, uint64_t key);

/**
 * Forgets h (every rank, in the same place of the sequence): m no longer
 * knows it, so that it may be unregistered (its memory, and its address,
 * reused by another handle). Call it once no task submitted through m
 * names h any more (after tdm_mpi_wait_all, or with the handle's last
 * task done). tdm_mpi_forget_tiles forgets every tile of a partitioned
 * matrix. TDM_ERR_INVALID_ARG: not declared.
 */
TDM_API tdm_status tdm_mpi_forget(tdm_mpi *m, tdm_handle *h);
TDM_API tdm_status tdm_mpi_forget_tiles(tdm_mpi *m, tdm_handle *matrix);

/** The owner of a distributed handle, or -1 (not declared in m). */
TDM_API int tdm_mpi_owner(const tdm_mpi *m, const tdm_handle *h);

/**
 * Submits a task on every rank (each calls it, with the same
 * description, in the same order). It runs on the owner of the handles
 * it writes (W or RW; all of one owner: else tdm_mpi_submit_on), or on
 * rank 0 when it writes none; the inputs owned elsewhere are received
 * there first. Every
 * handle it names must be distributed. Its callback runs on the rank
 * that runs it. TDM_ERR_INVALID_ARG: a handle not declared, written
 * handles of different owners, TDM_COMMUTE; TDM_REDUX: TDM_ERR_INVALID_MODE
 * (the runtime's refusal, without tdm_handle_set_reduction) or
 * TDM_ERR_INVALID_ARG; otherwise as tdm_submit.
 */
TDM_API tdm_status tdm_mpi_submit(tdm_mpi *m, const tdm_task_desc *desc);

/**
 * tdm_mpi_submit, run on `rank` whatever the owners of what it writes
 * (which may then be several): its inputs go there, and what it writes
 * goes back to each handle's owner at once (one message per written
 * handle owned elsewhere). For a task better run near some data, or on a
 * rank with a device. TDM_ERR_INVALID_ARG: rank out of range; otherwise
 * as tdm_mpi_submit.
 */
TDM_API tdm_status tdm_mpi_submit_on(tdm_mpi *m, const tdm_task_desc *desc, int rank);

/**
 * Waits until the ranks have compared what they submitted, then until
 * every task and message of m on this rank has ended (as tdm_wait_all,
 * whose statuses it returns). Collective (every rank calls it at the
 * same place of the sequence, as StarPU-MPI's wait_for_all);
 * TDM_ERR_DIVERGED when the ranks' calls differ (see above).
 */
TDM_API tdm_status tdm_mpi_wait_all(tdm_mpi *m);

/**
 * Brings the current version of h to `rank` (every rank calls it): on
 * that rank, h's memory then holds the data (owned or received), as
 * after a task there read it. -1 for every rank. Returns once this
 * rank's part is done (a rank that gets h first waits for the ranks to
 * have compared what they submitted). Statuses as tdm_mpi_submit, and
 * TDM_ERR_DIVERGED.
 */
TDM_API tdm_status tdm_mpi_fetch(tdm_mpi *m, tdm_handle *h, int rank);

/* ---- distributions of tiled matrices ------------------------------------------ */

/** A grid of p x q ranks for `size` ranks: p the largest divisor of size
 * not above its square root, q = size / p (2 x 3 for 6, 1 x 7 for 7). */
TDM_API void tdm_mpi_grid(int size, int *p, int *q);

/** The owner of tile (i, j) in a 2-D block-cyclic distribution over a p x
 * q grid of ranks (ScaLAPACK's): (i mod p) * q + (j mod q). A 1-D cyclic
 * one over the rows is p = size, q = 1. */
TDM_API int tdm_mpi_block_cyclic(int p, int q, size_t i, size_t j);

/**
 * Owners for n tiles (in the order the caller numbers them) in proportion
 * to each rank's weight (weights[r] >= 0, not all 0): rank r gets
 * n * weights[r] / sum of weights, rounded, spread evenly along the
 * numbering by smooth weighted round-robin (each step, every rank's
 * credit grows by its weight and the rank of the largest credit, the
 * lowest on ties, takes the tile and loses the total): owners[k]. The
 * same on every rank for the same weights. TDM_ERR_INVALID_ARG: NULL, a
 * negative weight or none above 0.
 */
TDM_API tdm_status tdm_mpi_weighted_owners(const double *weights, int nranks, size_t n,
                                           int *owners);

/**
 * Each rank's weight, for tdm_mpi_weighted_owners: every rank gives its
 * own (`mine`: its throughput, declared or measured, in any unit shared
 * by the ranks; 0 or less: its workers, CPU and devices, as a rough
 * guess), and all[r] gets rank r's. Collective; call it while no message
 * of m is in flight (before the first submission, or after
 * tdm_mpi_wait_all on every rank).
 */
TDM_API tdm_status tdm_mpi_weights(tdm_mpi *m, double mine, double *all);

/**
 * Declares every tile (i, j) of the partitioned matrix `matrix`
 * (tdm_matrix_partition) distributed, owned by owners[i * tile_cols + j]
 * (tdm_matrix_tiles' counts), with the key key_base + i * tile_cols + j.
 * Errors as tdm_mpi_register, and TDM_ERR_NOT_PARTITIONED. To have the
 * whole matrix on one rank afterwards, tdm_mpi_fetch each tile to it
 * before tdm_mpi_forget_tiles and tdm_matrix_unpartition (each rank's
 * memory holds only the tiles it owns or received).
 */
TDM_API tdm_status tdm_mpi_register_tiles(tdm_mpi *m, tdm_handle *matrix, const int *owners,
                                          uint64_t key_base);

/** What m's messages came to on this rank so far: those completed (a
 * rank's fetch may return before its peer's send is counted there;
 * after tdm_mpi_wait_all every rank's count is settled). */
typedef struct tdm_mpi_counters {
  size_t struct_size;     /**< sizeof(tdm_mpi_counters) */
  uint64_t sent, received; /**< messages */
  uint64_t bytes_sent, bytes_received;
  uint64_t cache_hits;    /**< inputs found already received, at their version */
  uint64_t tasks_run;     /**< tasks this rank ran */
  uint64_t tasks_skipped; /**< tasks other ranks ran */
  /** messages (and checks) found complete by idle workers rather than
   * by the progress thread */
  uint64_t by_workers;
} tdm_mpi_counters;

/** Fills *out. TDM_ERR_INVALID_ARG: NULL, struct_size too small. */
TDM_API tdm_status tdm_mpi_get_counters(const tdm_mpi *m, tdm_mpi_counters *out);

#ifdef __cplusplus
}
#endif

#endif
