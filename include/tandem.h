/*
 * tandem.h - the public interface of Tandem, a task runtime for every core
 * and every GPU of a machine.
 *
 * An application registers its data (tdm_register_vector, tdm_register_matrix),
 * describes work as tasks that access that data in read (R), write (W) or
 * read-write (RW) mode, and submits them. Tandem infers the dependency graph
 * from the order of submission and the access modes, runs independent tasks
 * in parallel on worker threads (one per CPU core the process may use) and on
 * the OpenCL devices it finds (tandem/opencl.h), placing each task where its
 * performance models predict it ends first, and moves the data with the
 * tasks.
 *
 * Conventions that hold for every function below:
 *  - Errors are returned as a tdm_status (0 is success, errors are negative).
 *    The library never aborts on a user error; details go to the log
 *    callback of the runtime (tdm_config.log_fn). It prints nothing, unless
 *    the program installed no callback and a TANDEM_* variable is set
 *    (then to standard error: see tdm_config.log_fn).
 *  - When a call that takes a callback fails, the callback is never called.
 *  - Destructors accept NULL.
 *  - There is no global state: every object belongs to one runtime, and a
 *    process may create several runtimes that run side by side.
 *  - "Any thread" means any thread of the process, including the runtime's
 *    own workers (that is, code running inside a task), unless said otherwise.
 *    Functions that block say so, and return TDM_ERR_IN_TASK when called from
 *    a task of the same runtime, or from what its tdm_dispatch runs on the
 *    application's thread (a pinned task, a callback on dispatch), where
 *    blocking could deadlock the runtime.
 *  - `flags` arguments must be 0 for now.
 *  - fork(): a runtime belongs to the process that created it. In a child
 *    of that process its worker threads do not exist, so every call on it
 *    or on its objects fails at once with TDM_ERR_FORKED (and logs why):
 *    counts read 0, tdm_worker_id -1, tdm_task_release does nothing and
 *    tdm_runtime_destroy returns TDM_ERR_FORKED (the child's copy of its
 *    memory goes with the child). The child may create runtimes of its own. The parent's
 *    runtime is not affected.
 */
#ifndef TANDEM_H
#define TANDEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TDM_BUILDING_LIBRARY) && defined(__GNUC__)
#define TDM_API __attribute__((visibility("default")))
#else
#define TDM_API
#endif

/* printf-style checks of a function's format, where the compiler has them */
#ifdef __GNUC__
#define TDM_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define TDM_PRINTF(fmt, first)
#endif

/* The version this header belongs to, written only here (meson.build
 * reads it from these three lines). */
#define TDM_VERSION_MAJOR 0
#define TDM_VERSION_MINOR 1
#define TDM_VERSION_PATCH 0
#define TDM__STR(x) #x
#define TDM__XSTR(x) TDM__STR(x)
/** "MAJOR.MINOR.PATCH" of this header. */
#define TDM_VERSION                                                            \
  TDM__XSTR(TDM_VERSION_MAJOR) "." TDM__XSTR(TDM_VERSION_MINOR) "." TDM__XSTR(TDM_VERSION_PATCH)
/** MAJOR * 10000 + MINOR * 100 + PATCH, for comparisons in #if. */
#define TDM_VERSION_NUMBER                                                     \
  (TDM_VERSION_MAJOR * 10000 + TDM_VERSION_MINOR * 100 + TDM_VERSION_PATCH)

/** Buffers (handles) a codelet and a task describe in place (modes,
 * handles); a task with more gives them in arrays of its own
 * (tdm_codelet.dyn_modes, tdm_task_desc.dyn_handles). */
#define TDM_MAX_BUFFERS 8
/** Most buffers one task may access. */
#define TDM_MAX_TASK_BUFFERS 1024

/** Bytes of by-value arguments kept inside the task; larger ones are
 * allocated separately (still copied at submit). */
#define TDM_INLINE_ARGS 64

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

/*
 * One list generates the enum, tdm_strerror and tdm_status_name.
 * Codes are never renumbered; new ones are added at the end.
 */
#define TDM_STATUS_MAP(XX)                                                     \
  XX(OK, 0, "success")                                                         \
  XX(ERR_INVALID_ARG, -1, "invalid argument (NULL pointer, zero size or bad value)") \
  XX(ERR_NO_MEMORY, -2, "out of memory")                                       \
  XX(ERR_SYSTEM, -3, "a system call or library call failed (see the log)")     \
  XX(ERR_TOO_MANY_BUFFERS, -4, "a codelet declares more than TDM_MAX_TASK_BUFFERS buffers") \
  XX(ERR_INVALID_MODE, -5, "invalid access mode")                              \
  XX(ERR_WRONG_RUNTIME, -6, "object belongs to another runtime")               \
  XX(ERR_STALE_HANDLE, -7, "handle was unregistered (or unpartitioned)")       \
  XX(ERR_SHUTTING_DOWN, -8, "runtime is being destroyed")                      \
  XX(ERR_CYCLE, -9, "dependency would form a cycle")                           \
  XX(ERR_BUSY, -10, "handle is still in use")                                  \
  XX(ERR_IN_TASK, -11, "blocking call made from a task or callback of the same runtime") \
  XX(ERR_ALREADY_SUBMITTED, -12, "task was already submitted")                 \
  XX(ERR_DEP_NOT_SUBMITTED, -13, "task depends on a task not yet submitted")   \
  XX(ERR_PARTITIONED, -14, "handle is partitioned: use its tiles")             \
  XX(ERR_NOT_ACQUIRED, -15, "handle is not acquired by the host")              \
  XX(ERR_TOPOLOGY, -16, "machine topology could not be discovered (see the log)") \
  XX(ERR_NOT_PARTITIONED, -17, "handle is not partitioned")                   \
  XX(ERR_NO_OPENCL, -18, "OpenCL is not available: no loader, no platform or a broken one (see the log)") \
  XX(ERR_BUILD, -19, "an OpenCL program failed to build (the build log is in the log)") \
  XX(ERR_NO_DEVICE, -20, "the task can only run on an OpenCL device and no device is used") \
  XX(ERR_NOT_SUPPORTED, -21, "not supported (see the log)")                  \
  XX(ERR_TOO_LARGE, -22, "a buffer is larger than a device can hold (see the log)") \
  XX(ERR_FORKED, -23, "the runtime belongs to the parent process: this process is a fork() of it") \
  XX(ERR_OVERLAP, -24, "the memory overlaps memory already registered with the runtime") \
  XX(ERR_CANCELLED, -25, "the task was cancelled: a task whose results it reads failed or was cancelled") \
  XX(ERR_LOST, -26, "the handle's latest version was never produced (a task writing it failed or was cancelled); its data is the last version produced") \
  XX(ERR_TASK_FAILED, -27, "tasks failed or were cancelled since the last report (see the log)") \
  XX(ERR_DEVICE_LOST, -28, "the device stopped working (see the log)") \
  XX(ERR_WOULD_BLOCK, -29, "as many tasks as tdm_config.max_pending allows are unfinished: try again later") \
  XX(ERR_MISMATCH, -30, "a device's results differed from the CPU variant's (verification): the CPU's were kept (see the log)") \
  XX(ERR_KERNEL, -31, "an OpenCL kernel cannot be launched as written (its parameters or work size do not match): its variant is disabled on that device (see the log)") \
  XX(ERR_DIVERGED, -32, "the ranks of a distributed run (tandem/mpi.h) did not make the same calls in the same order: its distributed data cannot be trusted (see the log)")

typedef enum tdm_status {
#define TDM__STATUS_ENUM(name, value, msg) TDM_##name = (value),
  TDM_STATUS_MAP(TDM__STATUS_ENUM)
#undef TDM__STATUS_ENUM
} tdm_status;

/** The version of the library loaded ("MAJOR.MINOR.PATCH"), which may be
 * newer than the header a program was built with (TDM_VERSION); its
 * numbers in *major, *minor, *patch when they are not NULL. Any thread,
 * no runtime needed. */
TDM_API const char *tdm_version(unsigned *major, unsigned *minor, unsigned *patch);

/** A static English message for a status; "unknown status" for others.
 * Any thread. */
TDM_API const char *tdm_strerror(tdm_status status);

/** The status' name without prefix, e.g. "ERR_CYCLE". Any thread. */
TDM_API const char *tdm_status_name(tdm_status status);

/* ------------------------------------------------------------------------ */
/* Configuration and lifecycle                                              */
/* ------------------------------------------------------------------------ */

typedef enum tdm_log_level {
  TDM_LOG_ERROR = 0,
  TDM_LOG_WARNING = 1,
  TDM_LOG_INFO = 2,
  TDM_LOG_DEBUG = 3
} tdm_log_level;

/** Receives the runtime's log messages. `message` has no trailing newline and
 * is valid only during the call. Called from any thread of the process
 * (including workers), possibly from several at once: it must be thread-safe
 * and must not call back into Tandem. */
typedef void (*tdm_log_fn)(void *user_data, tdm_log_level level,
                           const char *message);

/** Called when a device the runtime uses is taken out of placement
 * (quarantined): `device` numbered as tdm_runtime_device numbers devices,
 * `why` a sentence. On a thread of the runtime, once per device; it must
 * not block, and may call the query functions. */
typedef void (*tdm_device_event_fn)(void *user_data, unsigned device, const char *why);

/** Called when a codelet's OpenCL variant is disabled on one device
 * because its kernel cannot be launched as written (`status`
 * TDM_ERR_KERNEL): its parameters do not take what Tandem passes, or the
 * driver refused its arguments or work size. A programming error, not a
 * failing device: the device keeps running other codelets. `codelet` is
 * the codelet's name, `device` numbered as tdm_runtime_device numbers
 * devices, `why` what the log says (valid during the call). Once per
 * codelet variant and device, on a thread of the runtime; it must not
 * block (the runtime's waits return TDM_ERR_IN_TASK there), and may call
 * the query functions and submit. */
typedef void (*tdm_kernel_event_fn)(void *user_data, const char *codelet, unsigned device,
                                    tdm_status status, const char *why);

/** How the devices used treat memory (tdm_config.device_memory). */
typedef enum tdm_device_memory {
  TDM_MEMORY_AS_REPORTED = 0, /**< as classified (default) */
  TDM_MEMORY_SHARED = 1,      /**< as an integrated GPU: no copies */
  TDM_MEMORY_SEPARATE = 2     /**< as a discrete GPU: copies */
} tdm_device_memory;

/** The largest synthetic topology taken (tdm_config.synthetic_topology). */
#define TDM_MAX_SYNTHETIC_PUS 16384
#define TDM_MAX_SYNTHETIC_OBJECTS 65536

typedef struct tdm_config {
  /** sizeof(tdm_config) as the caller was compiled; set by tdm_config_init.
   * Lets the structure grow at its end without breaking old callers. */
  size_t struct_size;
  /** Number of CPU worker threads. 0 (default): one per core the process
   * may use (cgroup cpuset and affinity mask, as hwloc reports them).
   * Environment: TANDEM_NWORKERS. The workers are named tandem-cpu0,
   * tandem-cpu1, ... (what `top -H` and debuggers show). */
  unsigned nworkers;
  /** Nonzero (default): bind each worker to its core. Environment:
   * TANDEM_BIND=0|1. Binding is never done on a synthetic topology. */
  int bind_workers;
  /** Microseconds an idle worker keeps looking for work before it parks
   * (default 50). Longer helps fine-grained work that comes in bursts;
   * shorter burns less CPU between sparse tasks. 0 parks at once.
   * Environment: TANDEM_SPIN_US. */
  unsigned spin_us;
  /** Log callback and its first argument. NULL (default): no log, unless
   * a TANDEM_* variable is set in the environment (and ignore_env is 0):
   * then messages up to log_level go to standard error, a line each after
   * "tandem: ". A callback receives every message and nothing is printed. */
  tdm_log_fn log_fn;
  void *log_data;
  /** Most verbose level passed to log_fn (default TDM_LOG_WARNING).
   * Environment: TANDEM_LOG_LEVEL=error|warning|info|debug. */
  tdm_log_level log_level;
  /** hwloc synthetic topology description (e.g. "pack:2 core:4 pu:2") used
   * instead of the real machine, to plan and test placement. Workers are
   * then not bound. At most TDM_MAX_SYNTHETIC_PUS processing units and
   * TDM_MAX_SYNTHETIC_OBJECTS objects in all: a larger one is refused at
   * once (TDM_ERR_TOPOLOGY) rather than built. NULL (default): the real
   * machine. Environment: TANDEM_SYNTHETIC_TOPOLOGY. */
  const char *synthetic_topology;
  /** Nonzero: ignore the TANDEM_* environment variables (default 0). */
  int ignore_env;
  /** Must be 0 for now. */
  unsigned flags;
  /** Path of an hwloc XML topology (as written by `lstopo machine.xml`)
   * used instead of the real machine, like synthetic_topology (which must
   * then be NULL); it carries CPU kinds too. Workers are not bound. NULL
   * (default): the real machine. Environment: TANDEM_TOPOLOGY_XML. */
  const char *topology_xml;
  /** Which OpenCL devices the runtime uses, as a comma-separated list of
   * terms; a device is used when any term selects it:
   *   all          every GPU and accelerator (the default, also NULL or "")
   *   gpu          integrated and discrete GPUs
   *   integrated   integrated GPUs (they share the host's memory)
   *   discrete     discrete GPUs (memory of their own)
   *   accelerator  other OpenCL devices (FPGA, DSP...)
   *   cpu          OpenCL CPU devices (such as PoCL)
   *   N            device number N, as tdm_runtime_device and tandem-info
   *                number them
   *   none         no device, and OpenCL is not even loaded: CPU cores only
   * OpenCL CPU devices run on the cores the CPU workers already use, so
   * "all" leaves them out: only "cpu", their number or opencl_cpu_devices
   * admits them. A device seen through two platforms is used once; a
   * device on which no OpenCL context can be created is not used.
   * An unknown term makes tdm_runtime_create fail with TDM_ERR_INVALID_ARG.
   * Environment: TANDEM_DEVICES. */
  const char *devices;
  /** Nonzero: also admit OpenCL CPU devices (default 0). Environment:
   * TANDEM_OPENCL_CPU=0|1. */
  int opencl_cpu_devices;
  /** How the used devices treat memory (for testing both code paths on
   * one device). Environment: TANDEM_DEVICE_MEMORY=reported|integrated|
   * discrete. */
  tdm_device_memory device_memory;
  /** File name or path of the OpenCL ICD loader, opened at run time.
   * NULL (default): "libOpenCL.so.1". Environment: TANDEM_OPENCL_LIBRARY. */
  const char *opencl_library;
  /** Bytes of memory each device with memory of its own may hold for the
   * runtime; 0 (default): what the device reports. When full, the least
   * recently used copies that no running task uses are dropped (written
   * back first when they are the only copy). Environment:
   * TANDEM_DEVICE_MEMORY_LIMIT (bytes; a k, M or G suffix allowed). At
   * most 2^50 (1 PiB): more is refused (TDM_ERR_INVALID_ARG; in the
   * environment, ignored with a warning). */
  uint64_t device_memory_limit;
  /** Directory of the on-disk cache of compiled OpenCL programs and
   * performance models. NULL (default): $XDG_CACHE_HOME/tandem, else
   * $HOME/.cache/tandem. Created with mode 0700, files 0600. A compiled
   * program is code that runs in the process, so the cache is used only
   * if the directory belongs to the effective user and neither its group
   * nor others may write to it (else the runtime warns once and runs
   * without a cache), and a file in it is read only if it is a regular
   * file (not a link) of the user's that neither group nor others may
   * write. Environment: TANDEM_CACHE_DIR. */
  const char *cache_dir;
  /** Tasks each OpenCL device may have in flight (their transfers and
   * kernels enqueued): while one kernel runs, the inputs of the next ones
   * are copied. A task in flight can no longer go to a faster worker that
   * falls idle. 0 (default): adaptive, up to 8: the next task is enqueued
   * only when the device would otherwise run dry before its inputs are
   * there (the model's time for the tasks in flight against the next
   * one's copies, looked at again every 2 ms), so a slow device keeps
   * about one task and a fast one behind a slow link as many as hide the
   * copies; up to 8 while a task's time there is not known yet. N: N at
   * most, always (1 serialises transfers and kernels). Environment:
   * TANDEM_DEVICE_TASKS. */
  unsigned device_tasks;
  /** Path of a trace to write (Chrome trace-event JSON: open it in
   * https://ui.perfetto.dev or chrome://tracing; tools/tandem-trace turns
   * it into an SVG Gantt chart), at destroy and at each tdm_trace_flush.
   * NULL (default): no trace. Environment: TANDEM_TRACE. */
  const char *trace_path;
  /** Path of the submitted task graph to write at destroy, as Graphviz
   * DOT, each task coloured by the kind of worker that ran it. NULL
   * (default): none. Environment: TANDEM_DAG. */
  const char *dag_path;
  /** Nonzero: measure task and idle times, and log a summary of the
   * statistics (tdm_runtime_worker_stats) at destroy, at level info (the
   * log level is raised to info if it was lower). Default 0. Environment:
   * TANDEM_STATS=0|1. */
  int stats;
  /** Where tasks that several kinds of worker can run go (a codelet with
   * both a CPU and an OpenCL variant, on a runtime with devices):
   *   heft    (default) where the task is predicted to finish first: the
   *           backlog of each kind of worker, the time its inputs need to
   *           get there and its execution time as measured so far
   *           (performance models, kept in cache_dir); a kind of worker
   *           not yet measured on a codelet is tried first
   *   ws      work stealing: where it became ready, idle workers take
   *   eager   one queue for all: the first free worker takes it
   *   random  any worker that can run it (a baseline)
   * NULL or "": heft. Without devices every policy is work stealing.
   * Unknown: tdm_runtime_create fails with TDM_ERR_INVALID_ARG.
   * Environment: TANDEM_SCHED. */
  const char *scheduler;
  /** Emulated devices instead of OpenCL ones, to try placement on
   * machines one does not have. A ';'-separated list of devices, each a
   * name and settings:
   *   NAME:speedup=X,CODELET=X,memory=own|shared,latency=T,bandwidth=B,
   *        slow_at=T,slow_factor=X,workers=1
   * speedup: over one CPU worker for every codelet (default 1); CODELET=X
   * for the codelet of that name (0: cannot run it); memory: own (the
   * default: inputs cross a link of `latency` (s, ms, us, ns) and
   * `bandwidth` (bytes/s, with k, M, G, T)) or shared (no copies);
   * slow_at, slow_factor: from slow_at on (after creation) the device
   * runs slow_factor times slower, as a throttling GPU does. A class named
   * "cpu.N" declares instead the speed of the machine's kind N of core
   * (a hybrid chip's efficiency cores, say: their tasks are stretched). An emulated
   * device runs a task's CPU variant on a thread of its own, then waits
   * until the modelled time has passed. Data stays in host memory; which
   * node holds the current contents is tracked as for a real device, and
   * copies take their modelled time. With sim set, OpenCL is not looked
   * for, unless the list has the term "+opencl": then OpenCL's devices
   * (those `devices` chooses) run beside the emulated ones, which come
   * after them (a mixed machine mixes real and emulated time: a test of
   * placement and coherence across backends, not a measure of a
   * machine). NULL (default): none. A setting Tandem does not know, a
   * value out of range, or a key given twice in one device makes
   * tdm_runtime_create fail with TDM_ERR_INVALID_ARG, saying which.
   * Environment: TANDEM_SIM. */
  const char *sim;
  /** An emulated machine runs this many times slower than the real one:
   * a CPU task that took t takes scale * t (the worker sleeps the rest),
   * an emulated device's task scale * t / speedup, a copy scale times its
   * modelled time, so that a device faster than a CPU core can be
   * emulated with the CPU cores. 0 (default): twice the largest speed-up
   * declared, at least 1. Environment: TANDEM_SIM_SCALE. */
  double sim_time_scale;
  /** How many more times a task whose run on a device failed is tried,
   * each time on another kind of worker that can run it (another device,
   * or the CPU variant), never again on a device where it failed. Its
   * inputs are the versions it was given (see "Task outcomes"). 0: a
   * failure is final at once. Default 2; at most 100. Environment:
   * TANDEM_RETRIES. A run that failed after it started writing on a
   * device is tried again only when the versions it read and replaced
   * can be had again: the host's memory holds them (always with
   * `writeback`), or their lineage makes them again (see `lineage`). */
  unsigned retries;
  /** Nonzero (eager write-back): what a task writes on a device with
   * memory of its own starts its way home as soon as the task succeeds,
   * and a write on a device or the host keeps the version it replaces
   * until the write succeeded. It costs one copy to the host per device
   * write (a chain of tasks on data kept on a device copies it home at
   * every step instead of once at the end); in return every failed run
   * can be undone from the host's copy, and a device that stops working
   * holds no version nobody else has once its copies home landed (lineage
   * covers the moments before). 0 (default): what only a device holds is
   * made again, should that device fail, by its lineage (see `lineage`);
   * where lineage cannot, a run that fails after replacing such a
   * version ends failed, and a handle whose only copy was on a lost
   * device reports TDM_ERR_LOST. Environment: TANDEM_WRITEBACK (0 or
   * 1). */
  int writeback;
  /** Device faults to inject, to test what an application does when a
   * device fails: ';'-separated terms, KIND:p=X (each operation of that
   * kind fails with probability X, 0 to 1) or KIND:nth=N (every Nth
   * fails), and seed=S (the draws' sequence; default 1). KIND: `launch`
   * (the task fails before it runs), `run` (it runs, writes, and then
   * its device reports an error), `copy` (a copy between a device and
   * the host, or into a device from another, fails; counted on the
   * device copied into: on an emulated device it completes with an error,
   * its bytes replaced by a poison pattern, and what waits for it fails;
   * on OpenCL its enqueue fails) or `alloc` (a buffer on a device cannot
   * be made, as when its memory is full: the device makes room and tries
   * once more, else the task fails there) or `hang` (the completion of a
   * try the watchdog watches never comes: see watchdog_factor; an
   * emulated device's thread then waits until the runtime stops), on
   * OpenCL and emulated devices alike; and device=D:lost_at=T: device D (numbered as
   * tdm_runtime_device numbers devices) stops working T (s, ms, us)
   * after the runtime was created, or device=D:lost_after=N: at its Nth
   * launch (that launch fails): every launch, run, copy and allocation
   * there fails with TDM_ERR_DEVICE_LOST from then on, and it is
   * quarantined at once. E.g. "launch:p=0.05;copy:p=0.05;seed=7",
   * "device=1:lost_at=40ms" or "device=0:lost_after=20". A malformed or unknown term
   * makes tdm_runtime_create fail with TDM_ERR_INVALID_ARG, saying which.
   * NULL (default): none. Environment: TANDEM_FAULTS. */
  const char *faults;
  /** A device whose tries fail this many times within one second is
   * taken out of placement (quarantined): its queued tasks are placed
   * again, no task goes there any more. 0: never. Default 3, at most 16.
   * Environment: TANDEM_QUARANTINE. */
  unsigned quarantine_failures;
  /** Called when a device is quarantined (tdm_device_event_fn); NULL
   * (default): the log only. */
  tdm_device_event_fn device_event_fn;
  void *device_event_data;
  /** The watchdog for hung devices. A try that has run on a device
   * (counted from when it started there: on an OpenCL device, when the
   * tries queued before it ended) for longer than watchdog_factor times
   * the model's calibrated prediction for it, and at least watchdog_min
   * seconds, makes the device taken as hung: it is quarantined (its
   * reason says "hung"), every try in flight there is abandoned (a
   * completion that comes later is ignored) and tried again elsewhere as
   * after a failed run (see retries), and nothing more is started or
   * copied there, as for a device lost (TDM_ERR_DEVICE_LOST). A copy
   * between a device and the host that has not completed within
   * watchdog_factor times the link model's time for it (at least
   * watchdog_min), once what it waits for has completed, makes its
   * device hung too. So tdm_wait_all, tdm_handle_acquire,
   * tdm_handle_unregister and tdm_runtime_destroy never wait forever on
   * a device that stopped answering. Defaults: factor 50, minimum 1 s;
   * factor 0: off. A try of a codelet the model has not calibrated on
   * that device takes its prediction from another class where it is
   * calibrated (its CPU variant's, most often), else its limit is
   * watchdog_uncalibrated seconds (default 10; 0: not watched). At most
   * 1e6 each. Environment: TANDEM_WATCHDOG="off" or
   * "F[,MIN[,UNCALIBRATED]]", times with a unit (s, ms, us), e.g.
   * "50,1s" or "20,100ms,2s". A device that shares the host's memory may
   * still write the buffers of a try it abandoned if that try ever runs
   * on, and a copy home from a hung device may still land: Tandem cannot
   * stop a device's command. */
  double watchdog_factor;
  double watchdog_min;
  double watchdog_uncalibrated;
  /** The verification mode: a sample of the tasks of the codelets named
   * here that run on a device are run a second time by their CPU
   * variant, on a CPU worker, from the same inputs, and the outputs
   * compared within the codelet's tolerance (tdm_codelet.tolerance). A
   * difference is logged (error level) with the codelet, the device, how
   * many elements differ and the largest difference, and counted
   * (tdm_runtime_verify_counts, and the TANDEM_STATS summary); the CPU
   * variant's results replace the device's before any later task reads
   * them, tdm_wait_all returns TDM_ERR_MISMATCH for it once, and after
   * two mismatches of a codelet on a device its OpenCL variant is no
   * longer used on that device. The usual
   * cause of a difference is floating-point contraction: a device may
   * compute a * b + c in one fused operation, rounded once, where C
   * rounds twice; `#pragma OPENCL FP_CONTRACT OFF` in the kernel (and
   * -ffp-contract=off for the CPU variant) makes both round alike.
   * Terms CODELET:RATE separated by commas: the codelet's name (or * for
   * every codelet) and the fraction of its tasks sampled (above 0, at
   * most 1), spread evenly: "gemm:0.1,potrf:1" or "*:0.05". A sampled
   * task costs a second run, the copies of its outputs and read-write
   * inputs to the host, and holds back the tasks after it that use its
   * outputs until the comparison is done; while the mode is on,
   * submissions take one lock.
   * Codelets without a CPU variant are not verified. A malformed term
   * makes tdm_runtime_create fail with TDM_ERR_INVALID_ARG. NULL
   * (default): off. Environment: TANDEM_VERIFY. */
  const char *verify;
  /** Lineage: a version that a device alone holds is made again on the
   * host, should that device fail, by replaying the tasks that made it
   * (their CPU variants, each from the versions it read) instead of being
   * reported lost. Each handle keeps the chain of device writes since the
   * version its host memory holds, at most this many; a device write that
   * would make it longer first brings the version it replaces home (one
   * copy per that many writes). The versions the chain's tasks read are
   * kept: one in the host's memory is copied aside before that memory
   * changes (the application's unregistration included), one only
   * devices hold comes home before a device write replaces it, and a
   * task with a CPU variant that writes several handles on a device
   * brings the versions it replaces home first where only devices hold
   * them. A version is replayed when it cannot be read where it is: its
   * device is lost, hung or out of placement, a copy from it cannot
   * start, or a run that failed wrote over it (that run is then tried
   * again). It cannot be made again when a task that made it has no CPU
   * variant, when a copy home failed midway (the host's memory then holds no version to start from), or
   * beyond 8 replays nested: it is then lost, as without lineage. A
   * replay runs on a CPU worker, an emulated device's thread, or the
   * application's thread in tdm_handle_acquire or tdm_handle_unregister
   * (an OpenCL device leaves it to the next try, elsewhere). It costs,
   * per device task that writes, a record (its arguments and handle
   * list), kept while a chain holds it, and the copies named above. A
   * replay runs the CPU variant again, with whatever else it does (a
   * task it submits is submitted again): a codelet with such effects
   * wants lineage off.
   * Default 16; 0: off; at most 255. Environment: TANDEM_LINEAGE. */
  unsigned lineage;
  /** A lower scheduling priority for the CPU workers, so that the
   * application's own threads (its user interface) go first when the
   * cores are busy: 0 (default) leaves the workers as they were created;
   * 1 to 19, their nice value (each worker thread's, as Linux keeps it
   * per thread); TDM_WORKERS_IDLE, the SCHED_IDLE policy (a worker runs
   * only when nothing else wants its core). Neither needs privileges. A
   * worker that cannot be lowered runs as it is (a warning in the log).
   * Other values make tdm_runtime_create fail with TDM_ERR_INVALID_ARG.
   * Environment: TANDEM_WORKER_NICE=N|idle. */
  int worker_nice;
  /** Back-pressure: the most tasks submitted and not finished. Past it,
   * tdm_submit and tdm_task_submit called from a thread of the
   * application wait until tasks finish (tdm_submit_try returns
   * TDM_ERR_WOULD_BLOCK instead), so that a producer faster than the
   * machine keeps its memory bounded. Never from code the runtime runs
   * (a task's function, a completion callback; an OpenCL enqueue
   * function may not submit at all) nor from a thread holding a handle
   * it acquired: there a
   * submission goes through at once, past the bound, since the tasks
   * that would make room may wait for that code or that release. The
   * default, 65536 tasks (about 25 MiB of task records at most), keeps
   * every worker of a large machine fed; 0: no bound. Environment:
   * TANDEM_MAX_PENDING. */
  unsigned max_pending;
  /** The application's name, which keys its performance models: two
   * programs that both name a codelet "blur" keep their timings apart,
   * and `tandem-models` shows and resets them by this name. Letters,
   * digits and "._+-" are kept, other bytes become "_", at most 64 bytes.
   * NULL (default): the program's name (its argv[0] without directories).
   * Environment: TANDEM_APP. */
  const char *app;
  /** Called when a codelet's OpenCL variant is disabled on a device as a
   * programming error (tdm_kernel_event_fn). Whether or not it is set,
   * the log says why (error level), a task that nothing else can run
   * ends with TDM_ERR_KERNEL, and the next tdm_wait_all returns
   * TDM_ERR_KERNEL once (TDM_ERR_TASK_FAILED when tasks failed too). */
  tdm_kernel_event_fn kernel_event_fn;
  void *kernel_event_data;
  /** Nonzero (default): the OpenCL devices of one platform that have
   * memory of their own share one OpenCL context, so that a handle one
   * of them holds is copied straight into another's memory
   * (clEnqueueCopyBuffer, peer to peer where the driver can) instead of
   * through the host, and their commands wait for each other's events
   * directly. Where the platform refuses such a context, each device
   * gets its own. 0: a context per device, copies between devices
   * through the host. tdm_opencl_device returns the shared context.
   * Environment: TANDEM_OPENCL_PEER=0|1. */
  int opencl_peer;
} tdm_config;

/** tdm_config.worker_nice: the workers run under SCHED_IDLE. */
#define TDM_WORKERS_IDLE 20

/** Fills *config with the defaults listed above. Any thread. */
TDM_API void tdm_config_init(tdm_config *config);

typedef struct tdm_runtime tdm_runtime;

/**
 * Creates a runtime: discovers the machine with hwloc and its OpenCL
 * devices (unless config->devices is "none"), chooses the devices to use,
 * starts the workers and returns it in *out. Where OpenCL is missing or
 * broken the runtime runs on the CPU cores, and says why in the log.
 * The machine's topology is discovered once per process, by the first
 * runtime (about 1.3 ms on a 2-core machine, more with more cores; the
 * OpenCL platforms' start, at the first runtime that looks for devices,
 * is theirs: 20 ms for PoCL), and shared by every runtime after it: a
 * change of the process' cgroup cpuset after that is not seen (the
 * creating thread's affinity is, at each creation). `config` may be NULL
 * for the defaults; it is read
 * during the call only (strings are copied). TANDEM_* environment variables
 * override the config fields they name unless config->ignore_env is set; a
 * malformed variable is ignored with a warning in the log.
 *
 * Returns TDM_OK, TDM_ERR_INVALID_ARG (out NULL, struct_size too small,
 * flags not 0, an unknown term in devices, a bad device_memory),
 * TDM_ERR_TOPOLOGY, TDM_ERR_SYSTEM (a thread could not be started) or
 * TDM_ERR_NO_MEMORY; on error *out is set to NULL. A missing OpenCL is not
 * an error.
 * Any thread.
 */
TDM_API tdm_status tdm_runtime_create(const tdm_config *config,
                                      tdm_runtime **out);

/**
 * Destroys a runtime. Blocking: from the moment it is called, submissions
 * from threads other than the runtime's own workers fail with
 * TDM_ERR_SHUTTING_DOWN; tasks already submitted run to completion, and the
 * tasks they submit are accepted and run too, so a running graph is never
 * cut; a handle the host still holds acquired is released first, with a
 * warning in the log. Then the workers stop and every task and handle of the
 * runtime is freed, including tasks created and never released: the
 * registered memory stays the application's and holds the result of every
 * task. Pointers to tasks and handles of the runtime must not be used
 * afterwards. NULL is accepted (TDM_OK). Must not be called twice or
 * concurrently with itself.
 * Returns TDM_OK; TDM_ERR_DEVICE_LOST when the runtime was destroyed but
 * a device had been found hung (tdm_config.watchdog_factor): the commands
 * it never completed, its queues and their records are left behind
 * (logged), as the driver may still hold them; or, without destroying
 * anything (logged): TDM_ERR_IN_TASK when called from a task of the same
 * runtime (destroy would wait for that task), or from any task, callback
 * or pinned task that a runtime runs on this thread (tdm_dispatch's
 * included: destroy would free what that call still uses; call it once
 * the callback has returned), TDM_ERR_FORKED in a fork()ed child (the
 * runtime is the parent's; the child's copy of its memory goes with the
 * child). It returns in bounded time on a hung device as long as the
 * watchdog is on.
 */
TDM_API tdm_status tdm_runtime_destroy(tdm_runtime *rt);

/** Number of workers: one thread per CPU core (tdm_runtime_ncpu_workers),
 * numbered first, then one logical worker per OpenCL device used, which
 * is not a thread and holds no CPU core: its work is enqueued on the
 * device by whichever thread makes it ready, and completes through OpenCL
 * events. An emulated device (tdm_config.sim) is a worker with a thread
 * of its own. Any thread. */
TDM_API unsigned tdm_runtime_nworkers(const tdm_runtime *rt);

/** Number of CPU worker threads (workers 0 .. n-1). Any thread. */
TDM_API unsigned tdm_runtime_ncpu_workers(const tdm_runtime *rt);

/**
 * Sharing the machine with an application's own threads.
 *
 * tdm_runtime_pause stops the runtime's workers from starting tasks:
 * each CPU worker parks once its current task ends, the devices start
 * nothing new (tries already on a device finish, and end as usual);
 * submissions are still accepted and queue. tdm_runtime_resume lets them
 * go on. Neither waits, and both may be called from any thread, a task
 * or a callback included; pausing twice is pausing, resuming a running
 * runtime does nothing. While paused, whatever waits for tasks (
 * tdm_wait_all, tdm_task_wait, tdm_handle_acquire, tdm_submit past
 * tdm_config.max_pending) waits until another thread resumes the
 * runtime; tdm_runtime_destroy resumes it first.
 *
 * tdm_runtime_set_active_workers(rt, n) lets CPU workers 0 .. n-1 take
 * tasks and parks the others once their current task ends (n from 1 to
 * tdm_runtime_ncpu_workers; TDM_ERR_INVALID_ARG otherwise, logged), e.g.
 * one core left to the user interface while it is interactive, all when
 * it is idle. Tasks a parked worker made ready are stolen by the active
 * ones; placement still counts on every worker's kind of core. Device
 * workers are not counted. Any thread. tdm_runtime_active_workers gives
 * the count that runs now (0 while paused).
 *
 * Each returns TDM_OK, TDM_ERR_INVALID_ARG (rt NULL) or TDM_ERR_FORKED.
 */
TDM_API tdm_status tdm_runtime_pause(tdm_runtime *rt);
TDM_API tdm_status tdm_runtime_resume(tdm_runtime *rt);
TDM_API tdm_status tdm_runtime_set_active_workers(tdm_runtime *rt, unsigned n);
TDM_API unsigned tdm_runtime_active_workers(const tdm_runtime *rt);

/** Index of the calling worker of `rt` in [0, nworkers), or -1 when the
 * calling thread is not a worker of `rt`. In a task that an emulated
 * device runs: that device's worker. Any thread. */
TDM_API int tdm_worker_id(const tdm_runtime *rt);

/* ------------------------------------------------------------------------ */
/* The machine as the runtime sees it                                       */
/* ------------------------------------------------------------------------ */

/*
 * Each query fills a structure whose first field, struct_size, the caller
 * sets to sizeof the structure as it was compiled (so that structures can
 * grow at their end). Strings point into the runtime and stay valid until
 * it is destroyed; "" means unknown. Every query returns TDM_OK, or
 * TDM_ERR_INVALID_ARG for a NULL argument, a struct_size too small or an
 * index out of range. Any thread.
 */

/** What the processor side of the machine is (hwloc's view). */
typedef struct tdm_machine_info {
  size_t struct_size;
  /** "this machine", "synthetic topology <description>" or "XML topology
   * <path>". */
  const char *topology_source;
  const char *cpu_model;
  /** Counts in the whole machine. */
  unsigned packages, numa_nodes, cores, pus;
  /** Cores and hardware threads (PUs) the process may use: allowed by the
   * cgroup cpuset and in the affinity mask of the thread that created the
   * runtime. usable_cpus lists their OS numbers, e.g. "0-3,8". */
  unsigned usable_cores, usable_pus;
  const char *usable_cpus;
  /** Memory of all NUMA nodes, in bytes (0: unknown). */
  uint64_t memory_bytes;
  /** Size of one data cache of each level (0: none) and how many there are. */
  uint64_t l1d_bytes, l2_bytes, l3_bytes;
  unsigned l1d_count, l2_count, l3_count;
  /** Kinds of CPU cores (1 unless the chip is hybrid); see tdm_cpu_kind_info. */
  unsigned cpu_kinds;
  /** Workers: CPU threads, and logical workers of the devices used. */
  unsigned cpu_workers, device_workers;
  /** OpenCL: TDM_OK when a loader with at least one platform was found,
   * else TDM_ERR_NO_OPENCL; opencl_summary says what was found, or why
   * nothing was. */
  tdm_status opencl_status;
  const char *opencl_summary;
  unsigned opencl_platforms, opencl_devices;
  /** The device selection in force (config and environment applied). */
  const char *devices;
  int opencl_cpu_devices;
  tdm_device_memory device_memory;
} tdm_machine_info;

TDM_API tdm_status tdm_runtime_machine(const tdm_runtime *rt, tdm_machine_info *info);

/** A kind of CPU core. Hybrid chips have several (performance and
 * efficiency cores); kinds are numbered as hwloc ranks them, from the most
 * energy-efficient (0) to the most powerful. CPU workers are numbered kind
 * by kind, the most powerful kind first. */
typedef struct tdm_cpu_kind_info {
  size_t struct_size;
  /** hwloc's efficiency rank (higher: faster core), -1 when unknown. */
  int efficiency;
  /** The kind's name as the system reports it (e.g. "IntelCore",
   * "IntelAtom"), or "". */
  const char *name;
  /** Usable cores of this kind, and the ids of the workers on them
   * (e.g. "0-3"). */
  unsigned cores;
  unsigned workers;
  const char *worker_ids;
} tdm_cpu_kind_info;

TDM_API tdm_status tdm_runtime_cpu_kind(const tdm_runtime *rt, unsigned kind,
                                        tdm_cpu_kind_info *info);

typedef enum tdm_worker_type {
  TDM_WORKER_CPU = 0,   /**< a thread bound to one core */
  TDM_WORKER_DEVICE = 1 /**< the logical worker of an OpenCL device */
} tdm_worker_type;

typedef struct tdm_worker_info {
  size_t struct_size;
  tdm_worker_type type;
  /** CPU workers: the kind of its core, the core's logical number in
   * the topology, and the OS numbers of the CPUs it runs on. Device
   * workers: kind 0, core -1, cpus "". */
  unsigned cpu_kind;
  int core;
  const char *cpus;
  /** OS number of the NUMA node of its core, or nearest to its device;
   * -1 when unknown. */
  int numa_node;
  /** Device workers: the device number; CPU workers: -1. */
  int device;
} tdm_worker_info;

TDM_API tdm_status tdm_runtime_worker(const tdm_runtime *rt, unsigned worker,
                                      tdm_worker_info *info);

typedef struct tdm_platform_info {
  size_t struct_size;
  const char *name, *vendor, *version;
  unsigned devices;
} tdm_platform_info;

TDM_API tdm_status tdm_runtime_platform(const tdm_runtime *rt, unsigned platform,
                                        tdm_platform_info *info);

/** What an OpenCL device is. The rules, in order: a device of type CPU is
 * a CPU device; a GPU reporting host-unified memory, or fine-grained system
 * SVM, is integrated; any other GPU is discrete; anything else is an
 * accelerator. */
typedef enum tdm_device_class {
  TDM_DEVICE_UNKNOWN = 0,
  TDM_DEVICE_INTEGRATED_GPU = 1, /**< a GPU sharing the host's memory */
  TDM_DEVICE_DISCRETE_GPU = 2,   /**< a GPU with memory of its own */
  TDM_DEVICE_CPU = 3,            /**< an OpenCL device on the CPU cores */
  TDM_DEVICE_ACCELERATOR = 4,    /**< anything else */
  TDM_DEVICE_EMULATED = 5        /**< an emulated device (tdm_config.sim) */
} tdm_device_class;

/** "integrated GPU", "discrete GPU", "CPU device", "accelerator" or
 * "unknown". Any thread. */
TDM_API const char *tdm_device_class_name(tdm_device_class c);

/** An OpenCL device found on the machine, used or not. Devices are
 * numbered platform by platform, in the order OpenCL lists them. */
typedef struct tdm_device_info {
  size_t struct_size;
  unsigned platform; /**< its platform's number (0 for an emulated device) */
  const char *name, *vendor, *driver_version;
  const char *opencl_version; /**< e.g. "OpenCL 3.0 ..." */
  tdm_device_class device_class;
  const char *class_reason;   /**< which rule classified it */
  /** 1: the device works on the host's memory without copies (integrated
   * GPU, CPU device), 0: data is copied to its memory. memory_reason says
   * whether this is what the device reports or forced by device_memory. */
  int shared_memory;
  const char *memory_reason;
  unsigned compute_units, clock_mhz;
  uint64_t global_mem_bytes, max_alloc_bytes, local_mem_bytes;
  int fp64;                 /**< double precision supported */
  int host_unified_memory;  /**< as the device reports it */
  uint64_t svm_capabilities; /**< CL_DEVICE_SVM_CAPABILITIES bits */
  /** PCI address (cl_khr_pci_bus_info) and UUID (cl_khr_device_uuid),
   * where the driver offers them. */
  int has_pci;
  unsigned pci_domain, pci_bus, pci_device, pci_function;
  int has_uuid;
  uint8_t uuid[16];
  /** The device this one duplicates (the same hardware seen through
   * another platform), or -1. */
  int duplicate_of;
  /** OS number of the nearest NUMA node, and the OS numbers of the CPUs
   * near it; -1 and "" when unknown (hwloc knows it for AMD and NVIDIA
   * devices on Linux). */
  int numa_node;
  const char *near_cpus;
  /** 1 when the runtime uses it; `usage` says why or why not. */
  int used;
  const char *usage;
  /** Its worker's id when used, else -1. */
  int worker;
  /** 1: taken out of placement after failures (see docs/failures.md);
   * quarantine_reason says why. 0 otherwise. */
  int quarantined;
  const char *quarantine_reason;
} tdm_device_info;

TDM_API tdm_status tdm_runtime_device(const tdm_runtime *rt, unsigned device,
                                      tdm_device_info *info);

/** What moved to and from a device, and what ran on it, since the runtime
 * was created. Bytes count the data the runtime copied; a device sharing
 * the host's memory moves none. */
typedef struct tdm_device_counters {
  size_t struct_size;
  uint64_t tasks;           /**< tasks run on the device */
  uint64_t bytes_to_device; /**< host to device */
  uint64_t bytes_to_host;   /**< device to host */
  uint64_t copies_to_device, copies_to_host; /**< number of transfers */
  uint64_t evictions; /**< copies dropped to make room on the device */
  /** Copies into this device straight from another device's memory (two
   * GPUs of one OpenCL context, emulated devices declared with peer=),
   * not through the host, and their bytes; counted in neither of the
   * above. Like those, copies started, failed ones included. */
  uint64_t copies_from_devices, bytes_from_devices;
} tdm_device_counters;

/** Counters of a device (numbered as tdm_runtime_device numbers them);
 * zero for a device the runtime does not use. Any thread; the figures of
 * a running runtime may be a moment old. A struct_size that ends at
 * `evictions` (the first version of the struct) gets those fields. */
TDM_API tdm_status tdm_runtime_device_counters(const tdm_runtime *rt, unsigned device,
                                               tdm_device_counters *counters);

/** What a worker did since the runtime was created. Times are measured
 * only when tracing or statistics are on (tdm_config.trace_path, stats),
 * else 0. For a device worker: tasks and busy time are the device's; idle,
 * parked and steals are 0. */
typedef struct tdm_worker_stats {
  size_t struct_size;
  uint64_t tasks;   /**< tasks run */
  uint64_t busy_ns; /**< running tasks */
  uint64_t idle_ns; /**< looking for work */
  uint64_t parked_ns; /**< asleep, for want of work or paused */
  /** Steals tried and tasks they took: a worker that steals from a deque
   * holding many tasks takes up to half of them (32 at most), one steal
   * each. */
  uint64_t steals_tried, steals_won;
} tdm_worker_stats;

/** Statistics of a worker (as tdm_runtime_worker numbers them). Any
 * thread; the figures of a running runtime may be a moment old. */
TDM_API tdm_status tdm_runtime_worker_stats(const tdm_runtime *rt, unsigned worker,
                                            tdm_worker_stats *stats);

/** How many functions tdm_runtime_add_idle_fn takes per runtime. */
#define TDM_MAX_IDLE_FNS 8

/** Adds a function that the CPU workers call while they are idle: each
 * time a worker that found no task looks again before it parks (once at
 * least, then through cfg.spin_us; none once all are parked), one
 * worker at a time, the functions in the order added. For a library
 * with work to poll (libtandem-mpi tests its MPI requests so, sooner
 * than its own thread would; it takes one of these). fn must return
 * quickly, must not block or wait for tasks (blocking calls refuse there
 * as in a task, TDM_ERR_IN_TASK), and may end deferred tasks
 * (tdm_deferred_end) and submit. TDM_ERR_INVALID_ARG: rt or fn NULL;
 * TDM_ERR_BUSY: TDM_MAX_IDLE_FNS already; TDM_ERR_IN_TASK: from an idle
 * function. Any other thread. */
TDM_API tdm_status tdm_runtime_add_idle_fn(tdm_runtime *rt, void (*fn)(void *data), void *data);

/** Removes the function added with this fn and data; returns once no
 * worker is calling it (so data may be freed then). TDM_ERR_INVALID_ARG:
 * not added; TDM_ERR_IN_TASK: from an idle function (it would wait for
 * itself). Any other thread. */
TDM_API tdm_status tdm_runtime_remove_idle_fn(tdm_runtime *rt, void (*fn)(void *data),
                                              void *data);

/** Writes a message to rt's log (tdm_config.log_fn, at most log_level),
 * as the runtime's own messages are: for libraries built on Tandem
 * (libtandem-mpi) that report through the application's log. printf
 * format; cut at 1023 bytes. A NULL rt or fmt writes nothing. Any
 * thread. */
TDM_API void tdm_runtime_log(const tdm_runtime *rt, tdm_log_level level, const char *fmt, ...)
    TDM_PRINTF(3, 4);

/** Writes the trace recorded so far to tdm_config.trace_path (the whole
 * file again: it stays valid JSON). Returns TDM_OK, TDM_ERR_INVALID_ARG
 * (rt NULL, or no trace asked for) or TDM_ERR_SYSTEM (the file could not
 * be written; logged). Any thread. */
TDM_API tdm_status tdm_trace_flush(tdm_runtime *rt);

/** What the verification mode (tdm_config.verify) did so far. */
typedef struct tdm_verify_counts {
  size_t struct_size; /**< sizeof(tdm_verify_counts) */
  uint64_t sampled;    /**< tasks chosen for a second run */
  uint64_t compared;   /**< of those, run again by the CPU variant and compared */
  uint64_t mismatched; /**< of those compared, outside the codelet's tolerance */
  uint64_t skipped;    /**< not compared: the task failed, or ran on a CPU worker */
} tdm_verify_counts;

/** Fills *out with the verification mode's counts (all 0 when it is
 * off). TDM_ERR_INVALID_ARG: NULL, or a struct_size too small. Any
 * thread. */
TDM_API tdm_status tdm_runtime_verify_counts(const tdm_runtime *rt, tdm_verify_counts *out);

/** Allocates `size` bytes aligned for devices that share the host's memory
 * (4096 bytes), so that they can use it without copies; NULL when out of
 * memory or for size 0. Free with tdm_free. Any thread. */
TDM_API void *tdm_malloc(size_t size);
TDM_API void tdm_free(void *ptr);

/* ------------------------------------------------------------------------ */
/* Data                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct tdm_handle tdm_handle;

/**
 * How a task accesses a buffer.
 *
 * TDM_COMMUTE: reads and writes, as TDM_RW, but the tasks that name a
 * handle so one after another (no other access between them in
 * submission order) may run in any order, never two at once: each waits
 * for the accesses before the run of them, and the next other access
 * waits for all of them. A histogram's or a sum's updates, a list's
 * appends. The exclusion is held from the moment the task is ready
 * until it ends, retries included, wherever it runs (CPU or device); a
 * task whose several handles are TDM_COMMUTE takes them all at once.
 * If one of them fails, the version the run of them makes is lost (its
 * readers are cancelled, as after a failed TDM_RW); the others still run.
 *
 * TDM_REDUX: accumulates into the buffer. The handle must have a
 * reduction (tdm_handle_set_reduction). Tasks that name it so one after
 * another run in parallel, each on a private copy the reduction's init
 * codelet set to its identity: the copies are lanes
 * (tdm_reduction.copies, by default one per worker and device), the
 * n-th such task goes to lane n mod copies, and a lane's tasks run one
 * after another. The next other access to the handle (a task, an
 * acquisition, unregistration, partitioning, a recorded graph's launch,
 * tdm_runtime_destroy) first combines the lanes that were used into the
 * handle with the reduction's combine codelet, in a fixed order: lane 1
 * into lane 0, 3 into 2, ..., then pairs of those, then the result into
 * the handle. The result is therefore the same for a given submission order
 * and number of lanes, wherever the tasks ran (bitwise, floating point
 * included); the default number of lanes follows the workers, so a
 * result meant to be the same on other machines sets
 * tdm_reduction.copies. A task's function sees its lane's buffer: it must add to
 * it, not overwrite it. The verification mode (tdm_config.verify) does
 * not compare such tasks. A task may name a handle TDM_REDUX and also
 * access it otherwise (TDM_R, TDM_W, TDM_RW): that access sees what was
 * combined before the task, and its accumulation comes after it.
 *
 * Neither mode is accepted by a recorded graph (tdm_graph_add), a
 * data-parallel operation or a host acquisition (TDM_ERR_INVALID_MODE).
 */
typedef enum tdm_access {
  TDM_R = 1,        /**< reads only */
  TDM_W = 2,        /**< overwrites (former contents may be discarded) */
  TDM_RW = 3,       /**< reads and writes */
  TDM_REDUX = 4,    /**< accumulates into a private copy (see above) */
  TDM_COMMUTE = 11  /**< reads and writes, in any order, one at a time (TDM_RW | 8) */
} tdm_access;

/**
 * What a task function sees of one buffer. A matrix is stored by rows:
 * element (r, c) is at (char *)ptr + (r * ld + c) * elem_size, with
 * `rows` rows and `cols` columns. A vector is a column: rows elements,
 * cols = 1 and ld = 1. `nx` and `ny` are older names of rows and cols
 * (the same fields): rows is not OpenCL's dimension 0, which runs along
 * a row (see <tandem/opencl.h>).
 */
typedef struct tdm_buffer {
  void *ptr;
  size_t elem_size; /**< bytes per element */
  union {
    size_t rows; /**< vector: elements; matrix: rows */
    size_t nx;   /**< the same as rows */
  };
  union {
    size_t cols; /**< vector: 1; matrix: columns */
    size_t ny;   /**< the same as cols */
  };
  size_t ld; /**< elements between the starts of two rows */
} tdm_buffer;

/**
 * Registers `count` elements of `elem_size` bytes at `ptr` as a vector and
 * returns its handle. The memory stays owned by the caller, who must not
 * touch it while tasks may use it (see tdm_handle_acquire), and gets it back
 * with tdm_handle_unregister or tdm_runtime_destroy.
 * The memory must not share a byte with a handle registered with the same
 * runtime and not yet unregistered (two handles over one buffer would
 * each order their own tasks, which would race): that is refused with
 * TDM_ERR_OVERLAP. Touching regions, matrices whose rows only interleave
 * (the left and right halves of a matrix) and memory registered with
 * another runtime are fine; tiles come from tdm_matrix_partition. The
 * check costs O(log n) in the number of registered handles.
 * Returns TDM_ERR_INVALID_ARG for a NULL rt/ptr/out, a zero count or size,
 * or a size in bytes that overflows; TDM_ERR_OVERLAP, TDM_ERR_SHUTTING_DOWN,
 * TDM_ERR_NO_MEMORY, TDM_ERR_FORKED. Any thread.
 */
TDM_API tdm_status tdm_register_vector(tdm_runtime *rt, void *ptr, size_t count,
                                       size_t elem_size, tdm_handle **out);

/**
 * Registers a row-major matrix of rows x cols elements of elem_size bytes,
 * with `ld` elements (ld >= cols) between the starts of consecutive rows.
 * Same ownership and errors as tdm_register_vector. Any thread.
 */
TDM_API tdm_status tdm_register_matrix(tdm_runtime *rt, void *ptr, size_t ld,
                                       size_t rows, size_t cols,
                                       size_t elem_size, tdm_handle **out);

/** The buffer description of a handle (vector, matrix or tile), or
 * TDM_ERR_INVALID_ARG / TDM_ERR_STALE_HANDLE. Any thread. */
TDM_API tdm_status tdm_handle_buffer(const tdm_handle *h, tdm_buffer *out);

/**
 * Splits a matrix handle into a grid of tiles of tile_rows x tile_cols
 * elements (the last row and column of tiles are smaller when the sizes do
 * not divide). Non-blocking: each tile starts after the tasks already
 * submitted on the matrix, exactly as if those tasks had accessed the tile.
 * While partitioned, the matrix itself cannot be used by tasks
 * (TDM_ERR_PARTITIONED); tiles can be partitioned further.
 * Errors: TDM_ERR_INVALID_ARG (not a matrix, zero tile size),
 * TDM_ERR_PARTITIONED (already), TDM_ERR_BUSY (acquired by the host),
 * TDM_ERR_STALE_HANDLE, TDM_ERR_NO_MEMORY. Any thread.
 */
TDM_API tdm_status tdm_matrix_partition(tdm_handle *h, size_t tile_rows,
                                        size_t tile_cols, unsigned flags);

/** Number of tile rows and columns of a partitioned handle. Any thread. */
TDM_API tdm_status tdm_matrix_tiles(const tdm_handle *h, size_t *tile_rows_out,
                                    size_t *tile_cols_out);

/** The tile (i, j) of a partitioned handle, or NULL when h is not
 * partitioned or (i, j) is out of range. Owned by h. Any thread. */
TDM_API tdm_handle *tdm_matrix_tile(const tdm_handle *h, size_t i, size_t j);

/**
 * Joins the tiles back into the matrix. Non-blocking: later tasks on the
 * matrix wait for the tasks submitted on any tile. The tile handles become
 * stale. Errors: TDM_ERR_NOT_PARTITIONED, TDM_ERR_BUSY (a tile is acquired,
 * partitioned itself, or used by a created but unsubmitted task),
 * TDM_ERR_STALE_HANDLE. Any thread.
 */
TDM_API tdm_status tdm_matrix_unpartition(tdm_handle *h, unsigned flags);

/**
 * Splits a vector handle into pieces of `piece` elements (the last one
 * shorter when `piece` does not divide the count), as tdm_matrix_partition
 * splits a matrix into tiles, with the same semantics: non-blocking, each
 * piece starting after the tasks already submitted on the vector; the
 * vector itself refused to tasks while partitioned (TDM_ERR_PARTITIONED);
 * pieces are vectors, and can be partitioned further; a device holding
 * the vector copies only the pieces it is given. A kernel sees a piece as
 * a vector of its own (its buffer and length). Errors: TDM_ERR_INVALID_ARG
 * (not a vector, piece 0, flags not 0), TDM_ERR_PARTITIONED, TDM_ERR_BUSY
 * (acquired by the host), TDM_ERR_STALE_HANDLE, TDM_ERR_NO_MEMORY. Any
 * thread.
 */
TDM_API tdm_status tdm_vector_partition(tdm_handle *h, size_t piece, unsigned flags);

/** Number of pieces of a partitioned vector; TDM_ERR_NOT_PARTITIONED
 * otherwise. Any thread. */
TDM_API tdm_status tdm_vector_pieces(const tdm_handle *h, size_t *count);

/** Piece i of a partitioned vector, or NULL when h is not partitioned or
 * i is out of range. Owned by h. Any thread. */
TDM_API tdm_handle *tdm_vector_piece(const tdm_handle *h, size_t i);

/**
 * Joins the pieces back into the vector, as tdm_matrix_unpartition joins
 * tiles: non-blocking, the pieces become stale. Errors: those of
 * tdm_matrix_unpartition, and TDM_ERR_INVALID_ARG for a matrix. Any
 * thread.
 */
TDM_API tdm_status tdm_vector_unpartition(tdm_handle *h, unsigned flags);

/**
 * Gives the host access to a handle's memory: blocks until every task
 * submitted earlier that conflicts with `mode` has finished (writers for
 * TDM_R; readers and writers for TDM_W/RW). Until tdm_handle_release, tasks
 * submitted later that conflict with `mode` wait. One acquisition at a time
 * per handle (TDM_ERR_BUSY otherwise). TDM_ERR_LOST, not acquired, when
 * the version it would read (TDM_R, TDM_RW) was never produced: a task
 * writing it failed or was cancelled (see "Task outcomes" below); a
 * TDM_W acquisition is granted then, and what the host writes is the
 * handle's new version. Errors also: TDM_ERR_INVALID_MODE,
 * TDM_ERR_PARTITIONED, TDM_ERR_STALE_HANDLE, TDM_ERR_IN_TASK.
 * Blocking; not from a task of the same runtime.
 */
TDM_API tdm_status tdm_handle_acquire(tdm_handle *h, tdm_access mode);

/** Ends the host access begun by tdm_handle_acquire; waiting tasks may run.
 * TDM_ERR_NOT_ACQUIRED if it was not acquired. Any thread. */
TDM_API tdm_status tdm_handle_release(tdm_handle *h);

/**
 * Waits for every task submitted on the handle, then unregisters it: the
 * memory is the caller's again, holding the latest results, and the handle
 * is stale. Errors (nothing unregistered): TDM_ERR_BUSY when the handle is
 * acquired, partitioned, a tile (unpartition its matrix instead) or named
 * by a created but unsubmitted task; TDM_ERR_STALE_HANDLE; TDM_ERR_IN_TASK.
 * TDM_ERR_LOST when its newest version was never produced (a task writing
 * it failed or was cancelled): it is unregistered all the same, and its
 * memory holds the last version that was produced. A stale handle is detected as such while it is among the last 1024
 * handles the runtime unregistered; older stale pointers are invalid, as
 * freed memory is. Blocking; not from a task of the same runtime.
 */
TDM_API tdm_status tdm_handle_unregister(tdm_handle *h);

/* ------------------------------------------------------------------------ */
/* Tasks                                                                    */
/* ------------------------------------------------------------------------ */

/** A CPU implementation of a codelet. `bufs` holds one description per
 * buffer, in the order of the task's handles; `args` points to the task's
 * copy of its by-value arguments (NULL when it has none). */
typedef void (*tdm_cpu_fn)(const tdm_buffer *bufs, const void *args,
                           size_t args_size);
/** A task's footprint for the performance model (tdm_codelet.footprint),
 * from its nbufs buffer views and its arguments. */
typedef uint64_t (*tdm_footprint_fn)(const tdm_buffer *bufs, unsigned nbufs, const void *args,
                                     size_t args_size);

/**
 * What a kind of task does. The codelet is read when tasks using it run:
 * it must outlive them (a static const codelet is the usual case).
 */
/** An OpenCL variant of a codelet: see <tandem/opencl.h>. */
struct tdm_opencl_variant;

/*
 * Structures the library reads through the caller's pointer (tdm_codelet,
 * tdm_task_desc, tdm_opencl_variant) start with struct_size, as
 * tdm_config does, so that fields can be added at their end: 0 (what
 * "= {0}" and designated initializers leave) means the layout of this
 * version; sizeof the structure (the usual setting) is the layout the
 * program was compiled with: fields added later, past it, read as zero.
 * A nonzero size smaller than the structure's first version (version
 * 0.1: up to `opencl` and `priority`) is refused (TDM_ERR_INVALID_ARG);
 * fields beyond what the library knows are ignored.
 */

/** How far the results of a codelet computed by unlike workers (a device
 * and the CPU variant) may differ, for the verification mode
 * (tdm_config.verify). Each element of every buffer the codelet writes is
 * compared: exactly (bytes, or numerically equal values), within a
 * relative difference |a - b| <= value * max(|a|, |b|), or within `value`
 * units in the last place (the count of representable values between
 * them). Relative and ulps need `type` to say what the elements are;
 * with TDM_ELEM_BYTES (the default) they are compared byte for byte. */
typedef enum { TDM_TOL_EXACT = 0, TDM_TOL_RELATIVE, TDM_TOL_ULPS } tdm_tolerance_kind;
typedef enum { TDM_ELEM_BYTES = 0, TDM_ELEM_FLOAT, TDM_ELEM_DOUBLE } tdm_elem_type;
typedef struct tdm_tolerance {
  tdm_tolerance_kind kind;
  tdm_elem_type type;
  double value;
} tdm_tolerance;

typedef struct tdm_codelet {
  size_t struct_size;                /**< 0, or sizeof(tdm_codelet) */
  const char *name;                  /**< for logs and traces; may be NULL */
  /** The CPU variant; may be NULL: the task then runs on a device, or does
   * nothing when it has no OpenCL variant either. */
  tdm_cpu_fn cpu_fn;
  /** Buffers of each task, up to TDM_MAX_TASK_BUFFERS. */
  unsigned nbuffers;
  /** Access mode of each buffer, when nbuffers <= TDM_MAX_BUFFERS. */
  tdm_access modes[TDM_MAX_BUFFERS];
  /** The OpenCL variant, or NULL. A task with only this variant runs on
   * an OpenCL device; with both, where the placement policy
   * (tdm_config.scheduler) sends it: by default where it is predicted to
   * finish first, transfers included. */
  const struct tdm_opencl_variant *opencl;
  /** With more than TDM_MAX_BUFFERS buffers: the access modes of all
   * nbuffers of them (`modes` is then not read), read at each submission;
   * NULL otherwise. Such a task costs one allocation more at submission
   * (its buffers are kept beside it), and the CPU variant receives all
   * nbuffers tdm_buffer views as usual. */
  const tdm_access *dyn_modes;
  /** How its results on a device and by its CPU variant may differ, for
   * the verification mode (tdm_config.verify); zero: exactly equal. */
  tdm_tolerance tolerance;
  /** What the performance model tells this codelet's tasks apart by,
   * besides the bytes of their buffers (along which it interpolates);
   * tasks of equal footprints share a model (StarPU's footprints).
   * NULL: their buffers' shapes: vectors and square matrices of every
   * size share one model (footprint 0, the codelet's name alone), a
   * matrix of another proportion (rows over columns, by powers of two)
   * has its own, so that a 1000 x 10 matrix and a 100 x 100 one of the
   * same bytes are not mistaken for each other. Otherwise a function of
   * the task's buffer views and arguments, e.g. the dimensions of a
   * kernel's loop; 0 means the codelet's name alone. The placement calls
   * it several times per task, under its lock, on whatever thread places
   * or ends the task: it must be quick, give the same value for the same
   * task each time, and not call Tandem (the calls that wait, submit or
   * dispatch fail there with TDM_ERR_IN_TASK; the others are not to be
   * made). Models show as "NAME" or "NAME#FOOTPRINT" (16 hexadecimal
   * digits) in tandem-models: '#' in a codelet's own name is best
   * avoided, and codelets without a name share "(unnamed)". */
  tdm_footprint_fn footprint;
} tdm_codelet;

/**
 * How tasks that name a handle TDM_REDUX accumulate into it
 * (tdm_handle_set_reduction; the mode is described at tdm_access).
 */
typedef struct tdm_reduction {
  size_t struct_size; /**< sizeof(tdm_reduction), or 0 */
  /** Sets a lane's private copy to the identity: one buffer, TDM_W (a
   * copy of the handle's shape, rows packed: ld == cols). Its variants
   * run where it is placed, as any task's. */
  const tdm_codelet *init;
  /** Adds buffer 1 into buffer 0: two buffers, TDM_RW then TDM_R, of the
   * handle's shape (buffer 0 is the handle itself at the last step: its
   * own ld). Its CPU variant is required, and is the one used: the lanes
   * are combined by one task on a CPU worker, in the order tdm_access
   * describes (on a CPU worker even where devices could run the codelet:
   * the combination is not run twice). Both codelets get no arguments
   * (NULL, 0). */
  const tdm_codelet *combine;
  /** Lanes (private copies, each made on first use, freed with the
   * handle): 0 for one per worker (tdm_runtime_nworkers), at most 64. */
  unsigned copies;
} tdm_reduction;

/**
 * Gives h (a registered vector or matrix, not a tile) the reduction r
 * (copied; its codelets must outlive the handle), which TDM_REDUX needs.
 * Once per handle, before any task names it TDM_REDUX.
 * TDM_ERR_INVALID_ARG: NULL, a tile, r's codelets not as described, more
 * than 64 copies; TDM_ERR_BUSY: h has one already. Any thread.
 */
TDM_API tdm_status tdm_handle_set_reduction(tdm_handle *h, const tdm_reduction *r);

typedef struct tdm_task tdm_task;
/** A group of tasks (see "Task groups" below). */
typedef struct tdm_group tdm_group;

/** Called once the task has ended, whatever its outcome, and before the
 * tasks that depend on it are released: on the worker that ran it, or on
 * a thread of the runtime when it ran on a device, failed or was
 * cancelled (a CPU worker, an emulated device's thread, or the thread
 * that ends OpenCL completions when every CPU worker is busy: there
 * tdm_worker_id gives the device's worker or -1). tdm_callback_status
 * tells the outcome. It may submit tasks, also while tdm_runtime_destroy
 * waits; it must not block (the calls that would, and tdm_dispatch, fail
 * with TDM_ERR_IN_TASK on every one of those threads). */
typedef void (*tdm_task_callback)(void *user_data);

/** Everything a task is made of; read during tdm_submit / tdm_task_create
 * only: handles and arguments are copied. */
typedef struct tdm_task_desc {
  size_t struct_size;                   /**< 0, or sizeof(tdm_task_desc) */
  const tdm_codelet *codelet;           /**< required */
  /** codelet->nbuffers of them, when nbuffers <= TDM_MAX_BUFFERS */
  tdm_handle *handles[TDM_MAX_BUFFERS];
  const void *args;                     /**< copied; may be NULL */
  size_t args_size;
  tdm_task_callback callback; /**< may be NULL */
  void *callback_data;
  /** Which ready task starts first (default 0). A device's queue orders
   * by the value. The CPU workers order by its sign: every ready task
   * above 0 (an interactive preview) before any at 0, and those before
   * any below 0 (a background export); among tasks of one sign they keep
   * work stealing's order, which keeps a task's successors on the worker
   * whose cache holds their inputs (each worker takes the newest of its
   * own, idle ones steal the oldest). A task already running is not
   * interrupted. */
  int priority;
  /** With more than TDM_MAX_BUFFERS buffers: all codelet->nbuffers
   * handles (`handles` is then not read); copied. NULL otherwise. */
  tdm_handle *const *dyn_handles;
  /** The group the task belongs to (tdm_group_create), or NULL: its
   * progress counts the task, cancelling it cancels the task if it has
   * not started, and its priority is added to `priority`. */
  tdm_group *group;
  /** The task's share of its group's work, for the progress weighted by
   * cost (tdm_group_progress), kept to about 3 significant digits; 0
   * (the default) or less counts as 1. */
  float cost;
  /** TDM_TASK_* flags, or 0. */
  unsigned flags;
} tdm_task_desc;

/** tdm_task_desc.flags: the task runs only on the application's thread,
 * in tdm_dispatch (its CPU variant, which it must have: an OpenGL or
 * Vulkan upload, a call into a user interface toolkit), once its
 * dependencies have ended, like any task. Its outcome, callback and
 * successors are as for any task; if cancelled, it ends there too. */
#define TDM_TASK_MAIN_THREAD 1u
/** tdm_task_desc.flags: the task's callback runs in tdm_dispatch, on the
 * application's thread, once the task has ended (its dependents may have
 * started: they do not wait for it, nor do tdm_task_wait, tdm_group_wait
 * and tdm_wait_all, but it is queued before they return, so that a
 * tdm_dispatch after them runs it); tdm_callback_status gives the task's
 * outcome there. tdm_runtime_destroy runs those still queued. */
#define TDM_TASK_CALLBACK_ON_DISPATCH 2u
/** tdm_task_desc.flags: the task runs on the CPU workers only, never on
 * a device (an emulated one included) even when its codelet could: a
 * task whose function defers its end (tdm_task_defer), or calls a library
 * that must run on the process's own threads. */
#define TDM_TASK_CPU_ONLY 4u

/**
 * Creates and submits a task in one call; the caller keeps no reference.
 * The task runs once every earlier-submitted task it conflicts with through
 * a shared handle has finished: read-after-write, write-after-read and
 * write-after-write are ordered, readers of the same data run concurrently.
 *
 * Errors (the task does not exist and its callback never runs):
 * TDM_ERR_INVALID_ARG (NULL rt/desc/codelet, a NULL handle, args_size > 0
 * with NULL args, more than TDM_MAX_BUFFERS buffers without dyn_modes or
 * dyn_handles), TDM_ERR_TOO_MANY_BUFFERS, TDM_ERR_INVALID_MODE,
 * TDM_ERR_WRONG_RUNTIME (a handle of another runtime),
 * TDM_ERR_STALE_HANDLE, TDM_ERR_PARTITIONED, TDM_ERR_SHUTTING_DOWN,
 * TDM_ERR_NO_MEMORY; and for a codelet with an OpenCL variant and no CPU
 * variant, when no device can run it: TDM_ERR_NO_DEVICE (none is used),
 * TDM_ERR_BUILD (its program did not build), TDM_ERR_KERNEL (its kernel
 * cannot be launched as written), TDM_ERR_TOO_LARGE (a buffer does not
 * fit), TDM_ERR_INVALID_ARG (see TDM_OPENCL_POINTERS). Each is logged.
 * Any thread, including tasks. From a thread of the
 * application, waits first while tdm_config.max_pending tasks are
 * unfinished (back-pressure; see there, and tdm_submit_try); a wait
 * that tdm_runtime_destroy (from another thread) interrupts returns
 * TDM_ERR_SHUTTING_DOWN at once, and destroy does not return before it.
 */
TDM_API tdm_status tdm_submit(tdm_runtime *rt, const tdm_task_desc *desc);

/**
 * As tdm_submit, except that where tdm_submit would wait for room
 * (tdm_config.max_pending tasks unfinished, called from a thread of the
 * application), it returns TDM_ERR_WOULD_BLOCK at once: nothing was
 * submitted, and the callback does not run. Any thread.
 */
TDM_API tdm_status tdm_submit_try(tdm_runtime *rt, const tdm_task_desc *desc);

/**
 * Creates a task without submitting it, so that explicit dependencies can be
 * added first, and returns a reference to it in *out. The caller owns that
 * reference and must give it back with tdm_task_release (after or instead of
 * submitting). Same errors as tdm_submit. Any thread.
 */
TDM_API tdm_status tdm_task_create(tdm_runtime *rt, const tdm_task_desc *desc,
                                   tdm_task **out);

/**
 * Makes `task` (created, not yet submitted) wait for `pred` in addition to
 * its data dependencies. `pred` may be submitted, finished or not yet
 * submitted; in the last case it must be submitted before `task`.
 * Errors: TDM_ERR_INVALID_ARG (NULL), TDM_ERR_WRONG_RUNTIME,
 * TDM_ERR_ALREADY_SUBMITTED (task), TDM_ERR_CYCLE (pred already depends,
 * directly or not, on task, or pred == task), TDM_ERR_NO_MEMORY.
 * The cycle check costs nothing when pred was created before task (chains,
 * lattices, any graph created from its sources on); otherwise it searches
 * from both tasks, among the tasks between them in the order it keeps,
 * and stops with the smaller search. It holds a lock that only calls on
 * created tasks take, never the workers or tdm_submit. Any thread.
 */
TDM_API tdm_status tdm_task_depends_on(tdm_task *task, tdm_task *pred);

/**
 * Submits a created task. The caller's reference stays valid (for
 * tdm_task_wait) until tdm_task_release. Errors (the task stays created and
 * unsubmitted): TDM_ERR_INVALID_ARG, TDM_ERR_ALREADY_SUBMITTED,
 * TDM_ERR_DEP_NOT_SUBMITTED, TDM_ERR_STALE_HANDLE (a handle was
 * unregistered meanwhile), TDM_ERR_PARTITIONED, TDM_ERR_SHUTTING_DOWN,
 * TDM_ERR_NO_MEMORY. Any thread; waits for room as tdm_submit does.
 */
TDM_API tdm_status tdm_task_submit(tdm_task *task);

/**
 * Task outcomes. Every submitted task ends in exactly one of three ways:
 *  - done (TDM_OK): it ran and its results are the handles' new versions;
 *  - failed: it could not run, or its run failed (a device error: the
 *    status says which, e.g. TDM_ERR_SYSTEM, TDM_ERR_TOO_LARGE), and the
 *    log says why. Its outputs keep the versions they had;
 *  - cancelled (TDM_ERR_CANCELLED): a task whose results it reads (through
 *    a handle it reads, TDM_R or TDM_RW, or an explicit dependency)
 *    failed or was cancelled, so it never ran. Cancellation goes on
 *    transitively. A task that only overwrites a handle (TDM_W) after a
 *    failed writer is not cancelled: it makes a new version.
 * A handle whose newest version was never produced makes
 * tdm_handle_acquire (to read) and tdm_handle_unregister return
 * TDM_ERR_LOST; nothing reads a half-written buffer as a result.
 */

/** Blocks until the submitted task has ended (its callback included), and
 * returns its outcome: TDM_OK, its failure status, or TDM_ERR_CANCELLED.
 * TDM_ERR_INVALID_ARG if it was never submitted. Blocking; not from a task
 * of the same runtime, nor from what its tdm_dispatch runs
 * (TDM_ERR_IN_TASK). */
TDM_API tdm_status tdm_task_wait(tdm_task *task);

/** In a completion callback (tdm_task_desc.callback): the outcome of the
 * task it completes, as tdm_task_wait returns it. TDM_ERR_INVALID_ARG on a
 * thread that is not running a completion callback. */
TDM_API tdm_status tdm_callback_status(void);

/**
 * Deferred end: called by a task's CPU function (on a CPU worker, or in
 * tdm_dispatch for a pinned task), it makes the task not end when the
 * function returns but when tdm_deferred_end is called for it, from any
 * thread, exactly once. Until then the task holds its buffers as if it
 * were still running: their host memory is the task's (what it writes
 * there, before it ends, is its output), no task after it runs, and
 * tdm_wait_all waits for it. For operations the function starts and
 * something else completes: a message over the network, a request to
 * another library's queue (StarPU's starpu_task_end_dep_add does the
 * same). Returns the task's token, or NULL (logged where a runtime is
 * known) outside a task's CPU function, or twice in one run, or where
 * a device runs the function (an emulated device runs CPU variants): a
 * task that defers is flagged TDM_TASK_CPU_ONLY where devices may be.
 */
typedef struct tdm_deferred tdm_deferred;
TDM_API tdm_deferred *tdm_task_defer(void);

/** Ends the deferred task d with `status`: TDM_OK, or a failure (a
 * negative tdm_status: the task failed, its readers are cancelled as
 * after any failure). Its callback runs on this thread. The token is
 * invalid afterwards. TDM_ERR_INVALID_ARG: NULL or a positive status (the
 * task is then ended failed, with TDM_ERR_INVALID_ARG). */
TDM_API tdm_status tdm_deferred_end(tdm_deferred *d, tdm_status status);

/** Gives back the reference from tdm_task_create. A task released before
 * being submitted is discarded, and tasks that named it in
 * tdm_task_depends_on no longer wait for it. NULL is accepted. Any thread. */
TDM_API void tdm_task_release(tdm_task *task);

/** Blocks until every task submitted to the runtime, and every task those
 * submitted, has ended. Returns TDM_OK, or TDM_ERR_TASK_FAILED when tasks
 * failed or were cancelled since the previous call returned (or since the
 * runtime was created): the log then says how many and names the first of
 * each. Each call reports a failure once: the next call returns TDM_OK
 * unless more tasks failed meanwhile. When nothing failed:
 * TDM_ERR_MISMATCH, once, for the tasks whose device results the
 * verification mode replaced by the CPU variant's (tdm_config.verify:
 * every handle is right). Blocking; not from a task of the same runtime,
 * nor from what its tdm_dispatch runs (TDM_ERR_IN_TASK). */
TDM_API tdm_status tdm_wait_all(tdm_runtime *rt);

/**
 * Recorded graphs. A program that submits the same tasks every frame or
 * every iteration can record them once in a graph and launch it as many
 * times as it likes: the dependency analysis (which recorded task waits
 * for which, through their handles and tdm_graph_depend) is done once,
 * when recording; a launch makes the tasks, links the edges found then,
 * and looks at each handle once, not at every access.
 *
 * A launch behaves exactly as if the recorded tasks had been submitted
 * with tdm_submit, in the order they were recorded, at the moment of the
 * launch: its first tasks on a handle wait for what was submitted on it
 * before (tasks, other launches, a host acquisition), and what is
 * submitted after the launch waits for its tasks. Launches of one graph
 * may therefore follow each other without waiting in between, mixed with
 * ordinary submissions on the same handles. Recorded tasks are placed
 * like any task: on CPU workers or devices, by the runtime's policy;
 * their outcomes, retries, callbacks and groups are those of submitted
 * tasks. Wait for a launch with tdm_wait_all, a group, a callback, or by
 * acquiring a handle it writes.
 *
 * What is recorded: the codelet, the handles and their modes (read when
 * recording: later changes to the codelet's dyn_modes do not apply), a
 * copy of the arguments (tdm_graph_set_args replaces it between
 * launches), callback, priority, group, cost and flags. Data-parallel
 * operations (tdm_parallel_submit) are not recorded.
 *
 * A graph is used by one thread at a time (recording, launching and
 * tdm_graph_set_args do not lock); a second launch of a graph while one
 * is in progress on another thread fails with TDM_ERR_BUSY. Any thread,
 * including tasks. tdm_runtime_destroy frees the graphs left; none may
 * be used after it.
 */
typedef struct tdm_graph tdm_graph;

/** Creates an empty graph of rt in *out (NULL on error). Errors:
 * TDM_ERR_INVALID_ARG (NULL), TDM_ERR_NO_MEMORY. */
TDM_API tdm_status tdm_graph_create(tdm_runtime *rt, tdm_graph **out);

/**
 * Records a task as tdm_submit would submit it, after the tasks recorded
 * before; nothing runs. *node (if not NULL) gets its index: 0 for the
 * first task recorded, then 1, 2, ... Same checks and errors as
 * tdm_submit (TDM_ERR_INVALID_ARG, TDM_ERR_TOO_MANY_BUFFERS,
 * TDM_ERR_INVALID_MODE, TDM_ERR_WRONG_RUNTIME, TDM_ERR_STALE_HANDLE,
 * TDM_ERR_NO_DEVICE ...), and the graph is unchanged then. Tasks may be
 * recorded after launches: later launches include them.
 */
TDM_API tdm_status tdm_graph_add(tdm_graph *graph, const tdm_task_desc *desc, size_t *node);

/** Makes recorded task `node` wait for recorded task `pred`, recorded
 * before it (pred < node), besides what their handles order: an explicit
 * dependency, as tdm_task_depends_on makes (a failed or cancelled pred
 * cancels node). Errors: TDM_ERR_INVALID_ARG (NULL graph, an index out
 * of range, pred >= node), TDM_ERR_NO_MEMORY. */
TDM_API tdm_status tdm_graph_depend(tdm_graph *graph, size_t node, size_t pred);

/** Replaces the arguments recorded for task `node` by a copy of
 * args_size bytes at args (NULL and 0: none), for the launches that
 * follow; launches already made keep theirs. Errors:
 * TDM_ERR_INVALID_ARG (NULL graph, node out of range, args NULL with
 * args_size > 0), TDM_ERR_NO_MEMORY (the old arguments are kept). */
TDM_API tdm_status tdm_graph_set_args(tdm_graph *graph, size_t node, const void *args,
                                      size_t args_size);

/** The number of tasks recorded; 0 for NULL. */
TDM_API size_t tdm_graph_size(const tdm_graph *graph);

/**
 * Submits the recorded tasks, as described above. All or nothing: on
 * error no task of the launch was submitted. From a thread of the
 * application, waits first while tdm_config.max_pending tasks are
 * unfinished (the launch then adds all its tasks at once). Errors:
 * TDM_ERR_INVALID_ARG (NULL), TDM_ERR_BUSY (launched meanwhile by
 * another thread), TDM_ERR_STALE_HANDLE (a handle recorded was
 * unregistered), TDM_ERR_PARTITIONED (a handle recorded is partitioned
 * now), TDM_ERR_SHUTTING_DOWN, TDM_ERR_NO_MEMORY, TDM_ERR_IN_TASK (from
 * an OpenCL variant's enqueue or work-size function). In the
 * verification mode (tdm_config.verify) and while a trace or a graph
 * file is recorded, a launch submits the recorded tasks one by one
 * (tdm_task_create, tdm_task_depends_on, tdm_task_submit), which are
 * verified and traced as any: a launch refused there half-way leaves the
 * tasks before it submitted (logged). An empty graph launches nothing.
 */
TDM_API tdm_status tdm_graph_launch(tdm_graph *graph);

/** Frees a graph; the tasks of its launches go on. NULL is accepted. */
TDM_API void tdm_graph_destroy(tdm_graph *graph);

/** Called once a codelet's programs are built (tdm_codelet_build). */
typedef void (*tdm_build_fn)(void *user_data, tdm_status status);

/**
 * Builds the OpenCL programs of `codelet` on every device the runtime
 * uses, ahead of its first task (at start-up, say), on a thread of the
 * runtime, and returns at once. `done` (may be NULL) is called once every
 * device has its program: status TDM_OK when at least one device can run
 * it (or there is nothing to build: no OpenCL variant, no device),
 * TDM_ERR_BUILD when none can (the build logs are in the log),
 * TDM_ERR_NO_MEMORY. It runs on the runtime's build thread (or on the
 * calling thread when nothing had to wait) and must not block; an
 * application that wants it on its own thread submits a task flagged
 * TDM_TASK_MAIN_THREAD from it. Returns TDM_OK, TDM_ERR_INVALID_ARG (rt or
 * codelet NULL) or TDM_ERR_FORKED. Any thread.
 */
TDM_API tdm_status tdm_codelet_build(tdm_runtime *rt, const tdm_codelet *codelet,
                                     tdm_build_fn done, void *user_data);

/* ------------------------------------------------------------------------ */
/* Completion in the application's event loop                               */
/* ------------------------------------------------------------------------ */

/**
 * An application that runs an event loop on its user interface thread
 * receives there what it asked for (tasks flagged TDM_TASK_MAIN_THREAD,
 * callbacks flagged TDM_TASK_CALLBACK_ON_DISPATCH, group progress with
 * tdm_group_desc.progress_on_dispatch): the runtime queues them, and
 * makes a file descriptor readable while the queue is not empty. The loop
 * watches the descriptor (poll, a GLib GSource, a QSocketNotifier, libuv's
 * uv_poll) and calls tdm_dispatch when it becomes readable:
 *
 *     struct pollfd p = {.fd = tdm_runtime_event_fd(rt), .events = POLLIN};
 *     while (running) {
 *       poll(&p, 1, timeout);            // with the application's own fds
 *       if (p.revents & POLLIN)
 *         tdm_dispatch(rt);
 *     }
 *
 * Nothing the thread does blocks on the runtime. A GLib program does it
 * in one call: tdm_glib_attach in <tandem/glib.h>; docs/embedding.md
 * shows Qt, libuv and a plain poll loop.
 *
 * The dispatching thread is the last thread that called tdm_dispatch, or,
 * before any call, the thread that created the runtime. A wait on it
 * (tdm_wait_all, tdm_group_wait, tdm_task_wait, and the waits of
 * tdm_handle_unregister and tdm_handle_acquire) runs tdm_dispatch
 * whenever a pinned task is queued, so that waiting for work that
 * includes pinned tasks ends instead of waiting forever (what the
 * dispatch runs then includes the callbacks and progress calls queued
 * with them). A wait on another thread leaves pinned tasks to the
 * dispatching thread. tdm_runtime_destroy dispatches while it waits.
 */

/** The runtime's event descriptor (a Linux eventfd, non-blocking,
 * close-on-exec, owned by the runtime: do not close it), created at the
 * first call; -1 on error (logged) or for a NULL runtime. Readable while
 * something waits for tdm_dispatch. Any thread. */
TDM_API int tdm_runtime_event_fd(tdm_runtime *rt);

/** Runs, on the calling thread, what was queued for it when the call
 * began (in the order it was queued: pinned tasks in dependency order),
 * and returns how many; what they queue in turn waits for the next call
 * (the descriptor is readable again), so that the loop keeps turning.
 * Never blocks for tasks. One thread at a time: the application's event
 * loop. Returns the count (0: nothing was queued), or a negative status:
 * TDM_ERR_INVALID_ARG (rt NULL, another thread dispatching, or a nested
 * call), TDM_ERR_IN_TASK (from a worker), TDM_ERR_FORKED. */
TDM_API int tdm_dispatch(tdm_runtime *rt);

/* ------------------------------------------------------------------------ */
/* Data-parallel operations                                                 */
/* ------------------------------------------------------------------------ */

/*
 * One operation over an index range, shared by the CPU workers and the
 * devices: Tandem cuts the range into chunks along its first dimension
 * (the rows of a 2-D range, the elements of a 1-D one), each chunk a task
 * of its own, so that each kind of worker takes chunks at its speed and
 * all finish together. The operation is one node of the task graph with
 * respect to its handles: its chunks wait for the tasks submitted earlier
 * on them, and tasks submitted later wait for every chunk.
 *
 * Chunk sizes follow guided self-scheduling (Polychronopoulos and Kuck,
 * IEEE Trans. Computers 36(12), 1987), weighted by speed as the HGuided
 * scheduler of EngineCL does (Nozal, Bosque and Beivide, Future
 * Generation Computer Systems 107, 2020): each chunk is the part of the
 * range left over four times the machine's speed, in units of one CPU
 * worker's speed taken from the performance models of the codelet (a
 * device not yet measured counts as 16 workers), and never less than
 * the grain: large chunks first, which the placement policy gives to
 * the fastest workers, small ones at the end, which balance the tail.
 * While a class's model is not calibrated, the first chunks are small
 * probes. The chunks lie in the range in van der Corput's order (the
 * first at the start, the second in the middle...), so that those given
 * out first sample the whole range. Each chunk is placed as a task is
 * (tdm_config.scheduler; heft, the default, sends it where it is
 * predicted to end first, transfers included, and learns from every
 * chunk that ends, its time taken as proportional to its elements).
 * docs/parallel.md says more.
 *
 * Its handles are of two kinds (split_mask): a split handle is cut with
 * the range (a vector of range[0] elements by elements, a matrix of
 * range[0] rows by rows, whole rows: a device with memory of its own
 * copies only each chunk's part, a device sharing the host's memory
 * copies nothing); another handle is given whole to every chunk, and
 * only read (TDM_R): a convolution's input image, a table of
 * coefficients.
 *
 * The CPU function (tdm_range_fn) gets the chunk's buffers, where a split
 * handle's buffer starts at the chunk's first element (or row): element i
 * of bufs[k] is element range->begin[0] + i of the handle; and the chunk
 * itself in global indices. An OpenCL kernel (the codelet's opencl
 * variant, whose arguments are those of a task: <tandem/opencl.h>) is
 * launched over the chunk with a global offset: one work-item per element
 * of a 1-D range, get_global_id(0) in [begin[0], end[0]); for a 2-D
 * range, dimension 0 along a row (get_global_id(0) in [0, range[1])) and
 * dimension 1 over the chunk's rows (get_global_id(1) in [begin[0],
 * end[0])). Its split buffers start at the chunk too, so that it indexes
 * them with get_global_id(d) - get_global_offset(d) and uses
 * get_global_id(d) where it needs the element's place in the range
 * (Mandelbrot's coordinates):
 *
 *   __kernel void saxpy(__global float *y, ulong ny, __global const float *x,
 *                       ulong nx, float a) {
 *     size_t i = get_global_id(0) - get_global_offset(0);
 *     y[i] += a * x[i];
 *   }
 *
 * The chunk decides the work size: a variant with its own `enqueue` or
 * `work_size` does not run chunks (see tdm_parallel_submit).
 */

/** A part of an operation's range: rows (or elements) [begin[0], end[0])
 * and columns [begin[1], end[1]) (0 and 1 for a 1-D range). */
typedef struct tdm_range {
  size_t begin[2], end[2];
} tdm_range;

/** The CPU function of an operation: runs `range` on bufs (see above). */
typedef void (*tdm_range_fn)(const tdm_buffer *bufs, const tdm_range *range, const void *args,
                             size_t args_size);

/** What an operation did, per kind of worker: index 0 the CPU workers,
 * 1 + k device k (as tdm_runtime_device numbers them; devices past the
 * eighth are not counted). */
#define TDM_PARALLEL_MAX_CLASSES 9
typedef struct tdm_parallel_stats {
  size_t struct_size; /**< set by the caller: sizeof(tdm_parallel_stats) */
  unsigned chunks;    /**< chunks the range was cut into */
  unsigned nclasses;  /**< entries below that are used: 1 + devices (at most 9) */
  /** Chunks that ended done, and their elements (rows x columns), per
   * class; a chunk retried counts where it was done. */
  uint64_t class_chunks[TDM_PARALLEL_MAX_CLASSES];
  uint64_t class_elements[TDM_PARALLEL_MAX_CLASSES];
  /** Seconds from the operation's first chunk start to the end of each
   * class's last chunk (0 for a class that ran none). */
  double class_end[TDM_PARALLEL_MAX_CLASSES];
  /** Seconds from the first chunk's start to the last chunk's end. */
  double makespan;
  /** The idle tail: seconds between the first and the last of the
   * classes that ran chunks to finish its last one (0 with one class). */
  double tail;
  /** Chunks that failed or were cancelled. */
  uint64_t failed;
  /** Bytes copied so that the chunks could run: their rows of the split
   * handles and the whole handles into a device's memory (or from
   * another device's), or home for a chunk on the CPU workers where a
   * device held the version; tries that failed included. A device that
   * shares the host's memory copies nothing. What a chunk wrote on a
   * device is copied home when something reads it, and counted by that
   * reader, not here (tdm_runtime_device_counters counts every copy). In
   * all, and per class for the chunks done there. */
  uint64_t bytes_moved;
  uint64_t class_bytes[TDM_PARALLEL_MAX_CLASSES];
} tdm_parallel_stats;

/*
 * Reductions. With tdm_parallel_desc.reduce, each chunk also gets, as its
 * last buffer, its *partial values*: a vector of `slots` values, each
 * holding the identity when the chunk starts. The CPU function combines
 * its rows' value into element 0 (acc = acc (+) value: the others stay
 * the identity). An OpenCL kernel gets it as one more buffer argument
 * after the codelet's (`__global T *partial, ulong slots`) and is launched
 * in work-groups of TDM_REDUCE_GROUP work-items along dimension 0, the
 * global size there rounded up to a multiple of it: work-items past the
 * range's end (get_global_id(0) at or past the chunk's row end for a 1-D
 * range, past range[1] for a 2-D one) touch no buffer and count as the
 * identity, and each work-group writes its value into element
 * get_group_id(0) + get_group_id(1) * get_num_groups(0). Once every chunk
 * has ended, the partial values are combined in the order of the range,
 * chunk after chunk and element after element (for SUM, MIN and MAX in
 * the value's own type, from its identity: 0, +inf, -inf), and written
 * into `result`: the same split gives the same result to the bit; an
 * adaptive split may differ run to run in the last bits of a floating
 * point sum, as the chunks' boundaries and where each ran do. A chunk that
 * fails makes the result lost, as a task's output (TDM_ERR_LOST to read
 * it). The verification mode does not compare partial values (a kernel
 * and a CPU function split a chunk differently); the partial values'
 * memory, the runtime's, goes at the next operation or at destroy.
 */
#define TDM_REDUCE_GROUP 64
typedef enum tdm_reduce_op {
  TDM_REDUCE_NONE = 0,
  TDM_REDUCE_SUM = 1,
  TDM_REDUCE_MIN = 2,
  TDM_REDUCE_MAX = 3,
  TDM_REDUCE_USER = 4
} tdm_reduce_op;
/** acc = acc (+) value, for TDM_REDUCE_USER: both reduce_size bytes. */
typedef void (*tdm_combine_fn)(void *acc, const void *value);

/** tdm_parallel_desc.flags: no device takes a chunk: the CPU workers
 * run them all (cpu_fn required). */
#define TDM_PARALLEL_NO_DEVICES 1u
/** The CPU workers take no chunk, though cpu_fn is set: the devices
 * chosen run them all (an emulated device runs the CPU function, and the
 * verification mode compares with it). A chunk left without a device
 * (each failed it, or was taken out of placement) fails with
 * TDM_ERR_NO_DEVICE. */
#define TDM_PARALLEL_NO_CPU 2u
/** A static split, for comparison with the adaptive one: one chunk per
 * CPU worker (active: tdm_runtime_set_active_workers) and one per device
 * chosen, in the order of the range (the CPU workers' first), sized by
 * tdm_parallel_desc.shares, and bound to its kind of worker: any CPU
 * worker runs a CPU worker's chunk, the device its own; nothing moves to
 * balance them (grain and max_chunks do not apply). A device's chunk that
 * fails is tried again on the CPU workers when cpu_fn is set and not
 * TDM_PARALLEL_NO_CPU (never on another device), else fails. */
#define TDM_PARALLEL_STATIC 4u

typedef struct tdm_parallel_desc {
  size_t struct_size; /**< 0, or sizeof(tdm_parallel_desc) */
  /** Its name (the models', the trace's), buffers (nbuffers, modes),
   * OpenCL variant, tolerance and footprint; its cpu_fn is not used (it
   * may be NULL): the operation's is below. Must outlive the operation,
   * as a task's codelet. At most TDM_MAX_BUFFERS buffers. */
  const tdm_codelet *codelet;
  /** The CPU function; NULL: devices only (the codelet's OpenCL
   * variant). */
  tdm_range_fn cpu_fn;
  /** The range: range[0] rows (or elements) and range[1] columns; 0 or 1
   * in range[1] is a 1-D range. */
  size_t range[2];
  /** codelet->nbuffers handles. */
  tdm_handle *handles[TDM_MAX_BUFFERS];
  /** Bit k: handles[k] is cut with the range (a vector of range[0]
   * elements, or a matrix of range[0] rows, and range[1] columns for a
   * 2-D range); the others are read whole by every chunk (TDM_R only).
   * At least one split handle. */
  unsigned split_mask;
  /** By-value arguments, copied, as a task's (tdm_task_desc.args). */
  const void *args;
  size_t args_size;
  /** The smallest chunk, in rows (or elements) of the range: a chunk is
   * never smaller, except a range smaller than it, which is one chunk.
   * 0: 1. */
  size_t grain;
  /** The most chunks (0: 4096): a larger grain is used where the range
   * would need more. */
  unsigned max_chunks;
  /** Bit k: device k (as tdm_runtime_device numbers them) may take
   * chunks; 0: every device that can run the codelet, but an OpenCL
   * device on the CPU cores (TDM_DEVICE_CPU, PoCL) when cpu_fn is set: it
   * would run on the cores the CPU workers use (name it here to use it
   * all the same). See TDM_PARALLEL_NO_DEVICES for none. The CPU workers
   * take chunks when cpu_fn is set. */
  uint64_t device_mask;
  /** TDM_PARALLEL_* flags, or 0. */
  unsigned flags;
  /** As a task's: each chunk has this priority, and joins this group,
   * as does the operation's last node (so that tdm_group_wait waits for
   * the operation whole, its statistics included): the group's progress
   * counts each chunk at its elements (tdm_task_desc.cost) and the last
   * node at almost nothing; cancelling the group cancels the chunks not
   * started, and the operation ends cancelled. */
  int priority;
  tdm_group *group;
  /** Called once the operation has ended (every chunk), as a task's
   * callback; tdm_callback_status gives its outcome. May be NULL. */
  tdm_task_callback callback;
  void *callback_data;
  /** Filled before the operation ends (before its callback runs and its
   * waits return); may be NULL. Must stay valid until then. */
  tdm_parallel_stats *stats;
  /** A reduction over the range (see "Reductions" above), or
   * TDM_REDUCE_NONE (0). */
  tdm_reduce_op reduce;
  /** TDM_REDUCE_SUM, _MIN, _MAX: TDM_ELEM_FLOAT or TDM_ELEM_DOUBLE. */
  tdm_elem_type reduce_type;
  /** TDM_REDUCE_USER: a value's bytes (1 to 64), its combination
   * (acc = acc (+) value, associative) and its identity (reduce_size
   * bytes, copied). */
  size_t reduce_size;
  tdm_combine_fn combine;
  const void *identity;
  /** With a reduction: a vector of one value (reduce_size bytes, or the
   * type's), not one of `handles`, that gets the result (written). */
  tdm_handle *result;
  /** With TDM_PARALLEL_STATIC: each class's share of the range, numbered
   * as the statistics' classes (0 the CPU workers together, shared
   * equally, 1 + k device k), finite and not negative, in any unit (a
   * class's part is its share over their sum); a share for a class that
   * takes no chunk is refused. All 0: by speed, as the adaptive split
   * counts it (the models of the codelet; a device they cannot predict
   * counts as 16 CPU workers). */
  double shares[TDM_PARALLEL_MAX_CLASSES];
} tdm_parallel_desc;

/**
 * Submits a data-parallel operation (see above). It ends done when every
 * chunk is done; failed (a chunk failed: its try was retried elsewhere
 * first, as a task's, only its own part redone) or cancelled otherwise:
 * then the split handles it writes are lost as a failed task's outputs
 * are (tdm_handle_acquire to read returns TDM_ERR_LOST). With `out`, a
 * reference to the operation's last node, a task to tdm_task_wait for
 * (its outcome is the operation's: TDM_ERR_CANCELLED when a chunk failed
 * or was cancelled) and give back with tdm_task_release; NULL: none.
 * With a reduction, the last node combines the partial values on a CPU
 * worker: should it fail itself (the partial values could not come home
 * from a device, as a task's input), the operation ends with that status,
 * its result is lost, and the split handles hold what every chunk wrote.
 *
 * While the call runs, the split handles are partitioned internally: no
 * other thread may use them then (a task naming one meanwhile may be
 * refused with TDM_ERR_PARTITIONED). Errors (nothing submitted):
 * TDM_ERR_INVALID_ARG (NULL or zero arguments, a handle whose shape is
 * not the range's, a whole handle not read only, no split handle,
 * unknown flags), TDM_ERR_NO_DEVICE (no CPU function and no device
 * chosen can run the codelet), the errors of tdm_submit for its handles
 * and codelet, and TDM_ERR_PARTITIONED for a split handle partitioned by
 * the application. Should a chunk's submission fail once others were
 * submitted (the runtime being destroyed, out of memory), the status
 * says so, the chunks not submitted are dropped and the operation has no
 * last node: the handles it writes then hold a part of its results.
 * A variant with its own `enqueue` or `work_size` does not run chunks
 * (the log says so): they go to the CPU function. Any thread, including
 * tasks; from a thread of the application, waits for room first as
 * tdm_submit does (tdm_config.max_pending), then submits every chunk.
 */
TDM_API tdm_status tdm_parallel_submit(tdm_runtime *rt, const tdm_parallel_desc *desc,
                                       tdm_task **out);

/* ------------------------------------------------------------------------ */
/* Task groups: progress, waiting and cancelling a part of the work         */
/* ------------------------------------------------------------------------ */

/**
 * A group gathers the tasks of one piece of work (a document's filters,
 * an export) so that the application can follow its progress, wait for
 * it alone and cancel it. A task joins a group at its creation
 * (tdm_task_desc.group) and belongs to that one only; groups do not nest.
 * Tasks that a task of the group submits join it only if they name it.
 */

/** Where a group stands; counts since its creation. */
typedef struct tdm_group_progress {
  size_t struct_size; /**< set by the caller: sizeof(tdm_group_progress) */
  /** Tasks submitted into the group, and those that ended (whatever the
   * outcome; their callbacks included). ended == submitted: idle. */
  uint64_t submitted, ended;
  /** Of the ended: failed, and cancelled (by tdm_group_cancel, or because
   * a task whose results they read failed or was cancelled). */
  uint64_t failed, cancelled;
  /** The same counts weighted by tdm_task_desc.cost. */
  double cost_submitted, cost_ended;
  /** 1 once tdm_group_cancel was called. */
  int cancel_requested;
} tdm_group_progress;

/** Called with a group's progress: see tdm_group_desc.progress_fn. */
typedef void (*tdm_progress_fn)(void *user_data, const tdm_group_progress *progress);

typedef struct tdm_group_desc {
  size_t struct_size;  /**< 0, or sizeof(tdm_group_desc) */
  const char *name;    /**< for logs; copied; may be NULL */
  /** Added to the priority of each of its tasks (see
   * tdm_task_desc.priority): an interactive preview's group above 0, a
   * background export's below. */
  int priority;
  /** Called as the group's tasks end, at most progress_hz times a second,
   * and each time the group becomes idle (every task submitted so far has
   * ended: the last call of a piece of work shows it whole). Never two
   * calls of one group at once; on a worker's thread (then it must not
   * block), or on the application's thread in tdm_dispatch when
   * progress_on_dispatch is set. May be NULL. */
  tdm_progress_fn progress_fn;
  void *progress_data;
  /** At most this many calls a second; 0: 10. */
  double progress_hz;
  /** 1: progress_fn runs in tdm_dispatch (see there). */
  int progress_on_dispatch;
} tdm_group_desc;

/** Creates a group (desc may be NULL: no progress callback, priority 0).
 * Returns TDM_OK, TDM_ERR_INVALID_ARG (rt or out NULL, struct_size too
 * small, progress_hz negative), TDM_ERR_NO_MEMORY or TDM_ERR_FORKED.
 * Any thread. */
TDM_API tdm_status tdm_group_create(tdm_runtime *rt, const tdm_group_desc *desc,
                                    tdm_group **out);

/** Fills *out with the group's progress. TDM_ERR_INVALID_ARG for a NULL
 * argument or a struct_size too small. Any thread. */
TDM_API tdm_status tdm_group_get_progress(const tdm_group *group, tdm_group_progress *out);

/**
 * Cancels the group: its tasks that have not started never start and end
 * cancelled (TDM_ERR_CANCELLED, their callbacks run), as do the tasks it
 * submits afterwards; tasks running finish. Tasks of other groups (or of
 * none) that read results of a cancelled task are cancelled too, by the
 * rules of "Task outcomes"; a handle whose newest version a cancelled
 * task was to write keeps the last version produced: tdm_handle_unregister
 * brings that one home and returns TDM_ERR_LOST, as does tdm_handle_acquire
 * to read. Tasks cancelled this way are not reported by
 * tdm_wait_all; those of other groups are. Does not wait (tdm_group_wait
 * does). Any thread, a task or a callback included. Returns TDM_OK or
 * TDM_ERR_INVALID_ARG.
 */
TDM_API tdm_status tdm_group_cancel(tdm_group *group);

/** Blocks until every task submitted into the group (and those they
 * submitted into it) has ended, and their progress calls (not those on
 * dispatch) have returned: none comes after it returns, until more tasks
 * are submitted into the group. Returns TDM_OK, TDM_ERR_CANCELLED when
 * the group was cancelled, TDM_ERR_TASK_FAILED when one of its tasks
 * failed or was cancelled, TDM_ERR_INVALID_ARG, or TDM_ERR_IN_TASK from a
 * task of the same runtime or from what its tdm_dispatch runs (a task
 * pinned to the application's thread, a callback on dispatch: it would
 * wait for the thread it runs on). */
TDM_API tdm_status tdm_group_wait(tdm_group *group);

/** Gives back the group: it goes once its tasks have ended (they keep it
 * meanwhile). It must not be used afterwards, nor named by new tasks.
 * Its progress calls go on while its tasks end: progress_data must stay
 * valid until tdm_group_wait has returned (no call comes after that)
 * and, with progress_on_dispatch, until a tdm_dispatch after that (or
 * until tdm_runtime_destroy, which runs what is left). Groups not released are freed by
 * tdm_runtime_destroy. NULL is accepted. Any thread. */
TDM_API void tdm_group_release(tdm_group *group);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_H */
