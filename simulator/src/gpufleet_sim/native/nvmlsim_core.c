/*
 * nvmlsim_core.c - library state, the state-file protocol, handles, fault injection, init/shutdown,
 * error strings and the system queries.
 *
 * Protocol (docs/simulator.md): readers stat() the state file on every call and reload it when its identity
 * (device, inode, size, mtime) changed; writers flock() <state>.lock, reload, change the tree, write
 * <state>.tmp.<pid>, fsync and rename() it over the state.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvmlsim.h"
#include "layout_asserts.h"

/* v3 structs are not in the pinned pynvml, so layout_asserts.h cannot cover them: check nvml.h's sizes. */
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v3_t) == 152, "nvmlGpuInstanceProfileInfo_v3_t size vs nvml.h");
_Static_assert(offsetof(nvmlGpuInstanceProfileInfo_v3_t, memorySizeMB) == 40, "v3 memorySizeMB offset");
_Static_assert(offsetof(nvmlGpuInstanceProfileInfo_v3_t, capabilities) == 144, "v3 capabilities offset");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_v3_t) == 140, "nvmlComputeInstanceProfileInfo_v3_t size");

struct nvmlDevice_st g_sim_dev[SIM_MAX_GPUS];
struct nvmlDevice_st g_sim_migdev[SIM_MAX_GPUS][SIM_MAX_GI][SIM_MAX_CI];
struct nvmlGpuInstance_st g_sim_gi[SIM_MAX_GPUS][SIM_MAX_GI];
struct nvmlComputeInstance_st g_sim_ci[SIM_MAX_GPUS][SIM_MAX_GI][SIM_MAX_CI];
struct nvmlEventSet_st g_sim_sets[SIM_MAX_EVENT_SETS];
cJSON *g_sim_root;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_refcount;
static char g_path[PATH_MAX];
static int g_wfd = -1;
static struct {
    int valid;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtim;
} g_st;

/* ------------------------------------------------------------------------------------------ locking */

int sim_guard_acquire(void)
{
    pthread_mutex_lock(&g_mu);
    return 0;
}

void sim_guard_release(int *unused)
{
    (void)unused;
    sim_write_abort();
    pthread_mutex_unlock(&g_mu);
}

/* -------------------------------------------------------------------------------------------- state */

static void remember_stat(const struct stat *st)
{
    g_st.valid = 1;
    g_st.dev = st->st_dev;
    g_st.ino = st->st_ino;
    g_st.size = st->st_size;
    g_st.mtim = st->st_mtim;
}

static int same_stat(const struct stat *st)
{
    return g_st.valid && g_st.dev == st->st_dev && g_st.ino == st->st_ino && g_st.size == st->st_size &&
           g_st.mtim.tv_sec == st->st_mtim.tv_sec && g_st.mtim.tv_nsec == st->st_mtim.tv_nsec;
}

static nvmlReturn_t refresh(int force)
{
    struct stat st;
    int fd;
    char *buf;
    size_t got = 0;
    cJSON *root, *gpus;
    double schema;

    if (stat(g_path, &st) != 0)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (!force && g_sim_root && same_stat(&st))
        return NVML_SUCCESS;
    fd = open(g_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return NVML_ERROR_MEMORY;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    root = cJSON_ParseWithLength(buf, got);
    free(buf);
    gpus = root ? cJSON_GetObjectItemCaseSensitive(root, "gpus") : NULL;
    if (!cJSON_IsObject(root) || !cJSON_IsArray(gpus) || (sim_jnum(root, "schema", &schema) && schema != 1.0)) {
        cJSON_Delete(root);
        g_st.valid = 0;
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    cJSON_Delete(g_sim_root);
    g_sim_root = root;
    remember_stat(&st);
    return NVML_SUCCESS;
}

int sim_is_initialized(void)
{
    return g_refcount > 0;
}

int sim_gpu_count(void)
{
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g_sim_root, "gpus"));
    return n > SIM_MAX_GPUS ? SIM_MAX_GPUS : n;
}

cJSON *sim_gpu_json(int gpu)
{
    if (gpu < 0 || gpu >= sim_gpu_count())
        return NULL;
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(g_sim_root, "gpus"), gpu);
}

/* ---------------------------------------------------------------------------------- fault injection */

/* "nvmlDeviceGetPciInfo_v3" also matches "nvmlDeviceGetPciInfo"; every nvmlInit* matches "nvmlInit". */
static int inject_lookup(const cJSON *map, const char *fn, nvmlReturn_t *code)
{
    char base[128];
    const char *suffix;
    const cJSON *item;
    size_t n;

    if (!cJSON_IsObject(map) || !fn)
        return 0;
    item = cJSON_GetObjectItemCaseSensitive(map, fn);
    if (!cJSON_IsNumber(item)) {
        item = NULL;
        suffix = strrchr(fn, '_');
        n = strlen(fn);
        if (suffix && suffix[1] == 'v' && suffix[2] >= '0' && suffix[2] <= '9' && (size_t)(suffix - fn) < sizeof(base)) {
            n = (size_t)(suffix - fn);
            memcpy(base, fn, n);
            base[n] = '\0';
            item = cJSON_GetObjectItemCaseSensitive(map, base);
        }
        if (!cJSON_IsNumber(item) && strncmp(fn, "nvmlInit", 8) == 0)
            item = cJSON_GetObjectItemCaseSensitive(map, "nvmlInit");
        if (!cJSON_IsNumber(item))
            return 0;
    }
    *code = (nvmlReturn_t)item->valueint;
    return 1;
}

nvmlReturn_t sim_begin(const char *fn)
{
    nvmlReturn_t rc, code;

    if (g_refcount <= 0)
        return NVML_ERROR_UNINITIALIZED;
    rc = refresh(0);
    if (rc != NVML_SUCCESS)
        return rc;
    if (inject_lookup(cJSON_GetObjectItemCaseSensitive(g_sim_root, "inject"), fn, &code))
        return code;
    return NVML_SUCCESS;
}

nvmlReturn_t sim_gpu_check(int gpu, const char *fn)
{
    cJSON *g = sim_gpu_json(gpu);
    nvmlReturn_t code;

    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sim_jbool(g, "lost", 0))
        return NVML_ERROR_GPU_IS_LOST;
    if (inject_lookup(cJSON_GetObjectItemCaseSensitive(g, "inject"), fn, &code))
        return code;
    return NVML_SUCCESS;
}

/* ----------------------------------------------------------------------------------------- handles */

static int in_array(const void *p, const void *base, size_t elem, size_t count, size_t *idx)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)base;
    if (!p || a < b || a >= b + elem * count || (a - b) % elem != 0)
        return 0;
    *idx = (a - b) / elem;
    return 1;
}

cJSON *sim_find_by_id(const cJSON *array, unsigned int id)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, array)
    {
        if (sim_jint(it, "id", -1) == (long long)id)
            return (cJSON *)it;
    }
    return NULL;
}

nvmlReturn_t sim_reresolve(sim_ref_t *ref)
{
    ref->g = sim_gpu_json(ref->gpu);
    ref->gio = NULL;
    ref->cio = NULL;
    if (!ref->g)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (ref->gi >= 0) {
        ref->gio = sim_find_by_id(sim_jpath(ref->g, "mig.gpu_instances"), (unsigned int)ref->gi);
        if (!ref->gio)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (ref->ci >= 0) {
        ref->cio = sim_find_by_id(sim_jpath(ref->gio, "compute_instances"), (unsigned int)ref->ci);
        if (!ref->cio)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t finish_ref(const char *fn, sim_ref_t *out)
{
    nvmlReturn_t rc;
    if (out->gpu >= sim_gpu_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = sim_gpu_check(out->gpu, fn);
    if (rc != NVML_SUCCESS)
        return rc;
    return sim_reresolve(out);
}

nvmlReturn_t sim_dev(const char *fn, nvmlDevice_t device, int flags, sim_ref_t *out)
{
    nvmlReturn_t rc = sim_begin(fn);
    size_t idx;

    if (rc != NVML_SUCCESS)
        return rc;
    if (in_array(device, g_sim_dev, sizeof(g_sim_dev[0]), SIM_MAX_GPUS, &idx)) {
        out->gpu = (int)idx;
        out->gi = -1;
        out->ci = -1;
    } else if (in_array(device, &g_sim_migdev[0][0][0], sizeof(g_sim_migdev[0][0][0]),
                        (size_t)SIM_MAX_GPUS * SIM_MAX_GI * SIM_MAX_CI, &idx)) {
        out->gpu = (int)(idx / (SIM_MAX_GI * SIM_MAX_CI));
        out->gi = (int)(idx / SIM_MAX_CI % SIM_MAX_GI);
        out->ci = (int)(idx % SIM_MAX_CI);
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    rc = finish_ref(fn, out);
    if (rc != NVML_SUCCESS)
        return rc;
    if (out->gi >= 0 && !(flags & SIM_F_MIG_OK))
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

nvmlReturn_t sim_gi(const char *fn, nvmlGpuInstance_t gi, sim_ref_t *out)
{
    nvmlReturn_t rc = sim_begin(fn);
    size_t idx;

    if (rc != NVML_SUCCESS)
        return rc;
    if (!in_array(gi, &g_sim_gi[0][0], sizeof(g_sim_gi[0][0]), (size_t)SIM_MAX_GPUS * SIM_MAX_GI, &idx))
        return NVML_ERROR_INVALID_ARGUMENT;
    out->gpu = (int)(idx / SIM_MAX_GI);
    out->gi = (int)(idx % SIM_MAX_GI);
    out->ci = -1;
    return finish_ref(fn, out);
}

nvmlReturn_t sim_ci(const char *fn, nvmlComputeInstance_t ci, sim_ref_t *out)
{
    nvmlReturn_t rc = sim_begin(fn);
    size_t idx;

    if (rc != NVML_SUCCESS)
        return rc;
    if (!in_array(ci, &g_sim_ci[0][0][0], sizeof(g_sim_ci[0][0][0]), (size_t)SIM_MAX_GPUS * SIM_MAX_GI * SIM_MAX_CI,
                  &idx))
        return NVML_ERROR_INVALID_ARGUMENT;
    out->gpu = (int)(idx / (SIM_MAX_GI * SIM_MAX_CI));
    out->gi = (int)(idx / SIM_MAX_CI % SIM_MAX_GI);
    out->ci = (int)(idx % SIM_MAX_CI);
    return finish_ref(fn, out);
}

static void init_handles(void)
{
    int g, i, c;
    for (g = 0; g < SIM_MAX_GPUS; g++) {
        g_sim_dev[g] = (struct nvmlDevice_st){g, -1, -1};
        for (i = 0; i < SIM_MAX_GI; i++) {
            g_sim_gi[g][i] = (struct nvmlGpuInstance_st){g, i};
            for (c = 0; c < SIM_MAX_CI; c++) {
                g_sim_migdev[g][i][c] = (struct nvmlDevice_st){g, i, c};
                g_sim_ci[g][i][c] = (struct nvmlComputeInstance_st){g, i, c};
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ writers */

static nvmlReturn_t errno_to_nvml(int err)
{
    return (err == EACCES || err == EPERM || err == EROFS) ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN;
}

static int needs_root(void)
{
    return sim_jbool(g_sim_root, "require_root", 1) && geteuid() != 0;
}

nvmlReturn_t sim_write_begin(void)
{
    char lock_path[PATH_MAX + 8];
    nvmlReturn_t rc;
    int fd;

    if (needs_root())
        return NVML_ERROR_NO_PERMISSION;
    snprintf(lock_path, sizeof(lock_path), "%s.lock", g_path);
    fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        int create_errno = errno;
        fd = open(lock_path, O_RDONLY | O_CLOEXEC); /* a lock file root made: flock works read-only */
        if (fd < 0)
            return errno_to_nvml(create_errno);
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            close(fd);
            return NVML_ERROR_UNKNOWN;
        }
    }
    g_wfd = fd;
    rc = refresh(1);
    if (rc == NVML_SUCCESS && needs_root())
        rc = NVML_ERROR_NO_PERMISSION;
    if (rc != NVML_SUCCESS)
        sim_write_abort();
    return rc;
}

void sim_write_abort(void)
{
    if (g_wfd >= 0) {
        flock(g_wfd, LOCK_UN);
        close(g_wfd);
        g_wfd = -1;
    }
}

nvmlReturn_t sim_write_commit(void)
{
    char tmp[PATH_MAX + 32];
    char *text;
    size_t len, done = 0;
    struct stat st;
    nvmlReturn_t rc = NVML_SUCCESS;
    int fd;

    if (g_wfd < 0)
        return NVML_ERROR_UNKNOWN;
    text = cJSON_Print(g_sim_root);
    if (!text) {
        sim_write_abort();
        return NVML_ERROR_MEMORY;
    }
    len = strlen(text);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", g_path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = errno_to_nvml(errno);
        goto out;
    }
    (void)fchmod(fd, 0644);
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = errno_to_nvml(errno);
            break;
        }
        done += (size_t)n;
    }
    if (rc == NVML_SUCCESS && (write(fd, "\n", 1) != 1 || fsync(fd) != 0))
        rc = errno_to_nvml(errno);
    if (rc == NVML_SUCCESS && fstat(fd, &st) != 0)
        rc = NVML_ERROR_UNKNOWN;
    close(fd);
    if (rc == NVML_SUCCESS && rename(tmp, g_path) != 0)
        rc = errno_to_nvml(errno);
    if (rc == NVML_SUCCESS)
        remember_stat(&st);
    else
        unlink(tmp);
out:
    free(text);
    if (rc != NVML_SUCCESS)
        g_st.valid = 0; /* the tree was changed in memory but not stored: reload it next call */
    sim_write_abort();
    return rc;
}

/* ------------------------------------------------------------------------------------- init / system */

static nvmlReturn_t do_init(const char *fn)
{
    SIM_LOCKED;
    const char *env;
    nvmlReturn_t rc, code;

    if (g_refcount == 0) {
        env = getenv("NVML_SIM_STATE");
        snprintf(g_path, sizeof(g_path), "%s", env && *env ? env : SIM_DEFAULT_STATE);
        g_st.valid = 0;
        init_handles();
    }
    rc = refresh(g_refcount == 0);
    if (rc != NVML_SUCCESS)
        return rc;
    if (inject_lookup(cJSON_GetObjectItemCaseSensitive(g_sim_root, "inject"), fn, &code))
        return code;
    g_refcount++;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init(__func__);
}

SIM_API nvmlReturn_t nvmlInit_v2(void)
{
    return do_init(__func__);
}

SIM_API nvmlReturn_t nvmlInit(void)
{
    return do_init(__func__);
}

SIM_API nvmlReturn_t nvmlShutdown(void)
{
    SIM_LOCKED;
    if (g_refcount <= 0)
        return NVML_ERROR_UNINITIALIZED;
    g_refcount--;
    return NVML_SUCCESS;
}

SIM_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
        return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    }
    return "Unknown Error";
}

/* the CUDA driver API version each branch ships: 580 -> 13.0 (the real H200 on 580.159.04: 13000, "CUDA Version:
 * 13.0"; tests/data/ground-truth/h200-sxm-passthrough-r580), 570 -> 12.8, 550 -> 12.4, 535 -> 12.2 */
static int cuda_version(void)
{
    switch (atoi(SIM_DRIVER_VERSION)) {
    case 580: return 13000;
    case 570: return 12080;
    case 550: return 12040;
    case 535: return 12020;
    default: return 12040;
    }
}

SIM_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    SIM_LOCKED;
    nvmlReturn_t rc = sim_begin(__func__);
    return rc != NVML_SUCCESS ? rc : sim_copy_str(SIM_DRIVER_VERSION, version, length);
}

SIM_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    SIM_LOCKED;
    char buf[96];
    nvmlReturn_t rc = sim_begin(__func__);
    if (rc != NVML_SUCCESS)
        return rc;
    snprintf(buf, sizeof(buf), "%d.%s", cuda_version() / 1000, SIM_DRIVER_VERSION);
    return sim_copy_str(buf, version, length);
}

static nvmlReturn_t get_cuda(const char *fn, int *out)
{
    SIM_LOCKED;
    nvmlReturn_t rc = sim_begin(fn);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = cuda_version();
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return get_cuda(__func__, cudaDriverVersion);
}

SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return get_cuda(__func__, cudaDriverVersion);
}
