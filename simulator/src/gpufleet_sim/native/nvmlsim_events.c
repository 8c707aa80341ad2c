/*
 * nvmlsim_events.c - event sets (XID and other events).
 *
 * Each GPU object carries "events": [{seq, type, data, gi_id, ci_id, time}], seq taken from the
 * host-wide "event_seq". A set registered on a GPU remembers event_seq at registration and only delivers
 * later events, each once, oldest first. nvmlEventSetWait_v2 polls the state file every 25 ms until its
 * timeout, then returns NVML_ERROR_TIMEOUT.
 */
#include <errno.h>
#include <time.h>

#include "nvmlsim.h"

#define POLL_MS 25

static struct nvmlEventSet_st *resolve_set(nvmlEventSet_t set)
{
    uintptr_t a = (uintptr_t)set, b = (uintptr_t)g_sim_sets;
    if (!set || a < b || a >= b + sizeof(g_sim_sets) || (a - b) % sizeof(g_sim_sets[0]) != 0)
        return NULL;
    return set->in_use ? set : NULL;
}

SIM_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    SIM_LOCKED;
    int i;
    nvmlReturn_t rc = sim_begin(__func__);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < SIM_MAX_EVENT_SETS; i++) {
        if (!g_sim_sets[i].in_use) {
            struct sim_event_reg empty = {0, 0, 0};
            int g;
            g_sim_sets[i].in_use = 1;
            for (g = 0; g < SIM_MAX_GPUS; g++)
                g_sim_sets[i].reg[g] = empty;
            *set = &g_sim_sets[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_MEMORY;
}

SIM_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    SIM_LOCKED;
    struct nvmlEventSet_st *s;
    nvmlReturn_t rc = sim_begin(__func__);
    if (rc != NVML_SUCCESS)
        return rc;
    s = resolve_set(set);
    if (!s)
        return NVML_ERROR_INVALID_ARGUMENT;
    s->in_use = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = sim_supported_events(r.g);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    SIM_LOCKED;
    sim_ref_t r;
    struct nvmlEventSet_st *s;
    struct sim_event_reg *reg;
    double seq = 0;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    s = resolve_set(set);
    if (!s)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~sim_supported_events(r.g))
        return NVML_ERROR_NOT_SUPPORTED;
    reg = &s->reg[r.gpu];
    if (!reg->registered) {
        sim_jnum(g_sim_root, "event_seq", &seq);
        reg->registered = 1;
        reg->cursor = seq;
    }
    reg->mask |= eventTypes;
    return NVML_SUCCESS;
}

/* one pass over the registered GPUs: deliver the oldest matching event, if any */
static nvmlReturn_t poll_once(nvmlEventSet_t set, nvmlEventData_t *data, int *delivered)
{
    SIM_LOCKED;
    struct nvmlEventSet_st *s;
    const cJSON *best = NULL, *ev;
    int best_gpu = -1, gpu, n, lost_gpu = -1;
    double best_seq = 0;
    nvmlReturn_t rc = sim_begin("nvmlEventSetWait_v2");

    *delivered = 0;
    if (rc != NVML_SUCCESS)
        return rc;
    s = resolve_set(set);
    if (!s)
        return NVML_ERROR_INVALID_ARGUMENT;
    n = sim_gpu_count();
    for (gpu = 0; gpu < n; gpu++) {
        const struct sim_event_reg *reg = &s->reg[gpu];
        const cJSON *g = sim_gpu_json(gpu);
        if (!reg->registered)
            continue;
        if (sim_jbool(g, "lost", 0) && lost_gpu < 0)
            lost_gpu = gpu;
        cJSON_ArrayForEach(ev, sim_jpath(g, "events"))
        {
            double seq;
            if (!sim_jnum(ev, "seq", &seq) || seq <= reg->cursor)
                continue;
            if (!((unsigned long long)sim_jint(ev, "type", 0) & reg->mask))
                continue;
            if (!best || seq < best_seq) {
                best = ev;
                best_seq = seq;
                best_gpu = gpu;
            }
        }
    }
    if (!best)
        return lost_gpu >= 0 ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
    data->device = &g_sim_dev[best_gpu];
    data->eventType = (unsigned long long)sim_jint(best, "type", 0);
    data->eventData = (unsigned long long)sim_jint(best, "data", 0);
    data->gpuInstanceId = (unsigned int)sim_jint(best, "gi_id", NVML_INVALID_ID);
    data->computeInstanceId = (unsigned int)sim_jint(best, "ci_id", NVML_INVALID_ID);
    s->reg[best_gpu].cursor = best_seq;
    *delivered = 1;
    return NVML_SUCCESS;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000LL;
}

SIM_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    long long deadline = now_ms() + timeoutms;
    int delivered;

    if (!data) {
        SIM_LOCKED;
        nvmlReturn_t rc = sim_begin(__func__);
        return rc != NVML_SUCCESS ? rc : NVML_ERROR_INVALID_ARGUMENT;
    }
    for (;;) {
        long long left;
        struct timespec ts;
        nvmlReturn_t rc = poll_once(set, data, &delivered);
        if (rc != NVML_SUCCESS || delivered)
            return rc;
        left = deadline - now_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        if (left > POLL_MS)
            left = POLL_MS;
        ts.tv_sec = 0;
        ts.tv_nsec = left * 1000000L;
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}
