/*
 * nvmlsim_gi.c - MIG mode and GPU instances.
 *
 * GPU-instance profiles are addressed two ways, kept apart as in NVML: the profile INDEX (the
 * NVML_GPU_INSTANCE_PROFILE_* enum) for profile info, the profile ID (info.id, what nvidia-smi prints) for
 * placements, creation and listing. Placements live on the memory-slice axis (8 slots; 4 on A30).
 * GPU-instance ids follow the driver's heap rule over that axis: id = axis/size - 1 + start/size.
 */
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvmlsim.h"
#include "nvmlsim_devfiles.h"

#define MAX_PROFILES 32

int sim_mig_enabled(const cJSON *g)
{
    return sim_jbool(g, "mig.supported", 0) && sim_jint(g, "mig.current", 0) == 1;
}

static cJSON *gi_profile_by_index(const cJSON *g, unsigned int index)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, sim_jpath(g, "mig.gi_profiles"))
    {
        if (sim_jint(p, "index", -1) == (long long)index)
            return (cJSON *)p;
    }
    return NULL;
}

cJSON *sim_gi_profile_by_id(const cJSON *g, unsigned int id)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, sim_jpath(g, "mig.gi_profiles"))
    {
        if (sim_jint(p, "id", -1) == (long long)id)
            return (cJSON *)p;
    }
    return NULL;
}

/* a profile id the driver knows and this board does not offer (the model block's "unoffered_gi_profile_ids": on
 * the H200 on 580, ids 6 and 10 answer NOT_FOUND / NOT_SUPPORTED where other unknown ids are INVALID_ARGUMENT) */
static int unoffered_profile(const cJSON *g, unsigned int id)
{
    const cJSON *m = sim_model_nvml(g), *p;
    cJSON_ArrayForEach(p, sim_jpath(m, "unoffered_gi_profile_ids"))
    {
        if (cJSON_IsNumber(p) && (unsigned int)p->valuedouble == id)
            return 1;
    }
    return 0;
}

static int placement_of(const cJSON *pl, unsigned int *start, unsigned int *size)
{
    if (cJSON_GetArraySize(pl) != 2)
        return 0;
    *start = (unsigned int)cJSON_GetArrayItem(pl, 0)->valueint;
    *size = (unsigned int)cJSON_GetArrayItem(pl, 1)->valueint;
    return *size > 0 && *start + *size <= 64;
}

static unsigned long long slot_mask(unsigned int start, unsigned int size)
{
    return (size >= 64 ? ~0ULL : ((1ULL << size) - 1ULL)) << start;
}

/* number of memory slots: the end of the furthest placement any profile offers */
static unsigned int axis_slots(const cJSON *g)
{
    const cJSON *p, *pl;
    unsigned int axis = 0, start, size;
    cJSON_ArrayForEach(p, sim_jpath(g, "mig.gi_profiles"))
    {
        cJSON_ArrayForEach(pl, sim_jpath(p, "placements"))
        {
            if (placement_of(pl, &start, &size) && start + size > axis)
                axis = start + size;
        }
    }
    return axis ? axis : 8;
}

static unsigned long long used_slots(const cJSON *g)
{
    const cJSON *gi;
    unsigned long long mask = 0;
    cJSON_ArrayForEach(gi, sim_jpath(g, "mig.gpu_instances"))
    {
        mask |= slot_mask((unsigned int)sim_jint(gi, "start", 0), (unsigned int)sim_jint(gi, "size", 0));
    }
    return mask;
}

static int count_instances(const cJSON *g, long long profile_id)
{
    const cJSON *gi;
    int n = 0;
    cJSON_ArrayForEach(gi, sim_jpath(g, "mig.gpu_instances"))
    {
        if (sim_jint(gi, "profile_id", -1) == profile_id)
            n++;
    }
    return n;
}

/* how many more instances of prof fit into the free slots of mask (greedy by start: optimal for
 * equal-size intervals), bounded by the profile's instance count */
static int capacity(const cJSON *g, const cJSON *prof, unsigned long long mask, int extra)
{
    const cJSON *pl;
    unsigned int start, size;
    int cap = (int)sim_jint(prof, "instances", 0) - count_instances(g, sim_jint(prof, "id", -1)) - extra, n = 0;
    if (cap <= 0)
        return 0;
    cJSON_ArrayForEach(pl, sim_jpath(prof, "placements"))
    {
        unsigned long long pm;
        if (!placement_of(pl, &start, &size))
            continue;
        pm = slot_mask(start, size);
        if (mask & pm)
            continue;
        mask |= pm;
        if (++n == cap)
            break;
    }
    return n;
}

static int name_ends(const cJSON *prof, const char *suffix)
{
    const char *name = sim_jstr(prof, "name");
    size_t n = name ? strlen(name) : 0, k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* a "+me.all" GPU instance holds every media engine (NVML: "1_SLICE profile with all of GPU Decode, Encoder,
 * JPEG, OFA engines"): beside it only "-me" instances (no media engines) fit, as on the driver */
static int media_conflict(const cJSON *g, const cJSON *prof)
{
    const cJSON *gi;
    int all_me = name_ends(prof, "+me.all"), no_me = name_ends(prof, "-me");
    cJSON_ArrayForEach(gi, sim_jpath(g, "mig.gpu_instances"))
    {
        const cJSON *other = sim_gi_profile_by_id(g, (unsigned int)sim_jint(gi, "profile_id", -1));
        if (!other)
            continue;
        if ((all_me && !name_ends(other, "-me")) || (!no_me && name_ends(other, "+me.all")))
            return 1;
    }
    return 0;
}

static int cmp_profiles(const void *a, const void *b)
{
    const cJSON *pa = *(const cJSON *const *)a, *pb = *(const cJSON *const *)b;
    long long d = sim_jint(pb, "slices", 0) - sim_jint(pa, "slices", 0);
    if (!d)
        d = sim_jint(pb, "memory_mib", 0) - sim_jint(pa, "memory_mib", 0);
    if (!d)
        d = sim_jint(pa, "index", 0) - sim_jint(pb, "index", 0);
    return d < 0 ? -1 : d > 0;
}

/*
 * The driver's choice when no placement is given (nvmlDeviceCreateGpuInstance): among the free placements,
 * take the one that leaves the most room for the largest profiles (remaining capacity compared profile by
 * profile, largest first); ties go to the lowest start. This reproduces the MIG User Guide's examples
 * (-cgi 19,14,5 -> 1g@6, 2g@4, 4g@0; 19x7 -> GIs 13,11,12,7,8,9,10; 9,19,14,19 -> 3g@4, 1g@0, 2g@2, 1g@1).
 */
static int choose_placement(const cJSON *g, const cJSON *prof, unsigned int *out_start, unsigned int *out_size)
{
    const cJSON *sorted[MAX_PROFILES], *p, *pl;
    int nprof = 0, best_score[MAX_PROFILES], score[MAX_PROFILES], found = 0, k;
    unsigned long long mask = used_slots(g);
    unsigned int start, size;

    cJSON_ArrayForEach(p, sim_jpath(g, "mig.gi_profiles"))
    {
        if (nprof < MAX_PROFILES)
            sorted[nprof++] = p;
    }
    qsort(sorted, (size_t)nprof, sizeof(sorted[0]), cmp_profiles);
    cJSON_ArrayForEach(pl, sim_jpath(prof, "placements"))
    {
        unsigned long long pm;
        int better = 0;
        if (!placement_of(pl, &start, &size))
            continue;
        pm = slot_mask(start, size);
        if (mask & pm)
            continue;
        for (k = 0; k < nprof; k++)
            score[k] = capacity(g, sorted[k], mask | pm, sorted[k] == prof ? 1 : 0);
        if (!found) {
            better = 1;
        } else {
            for (k = 0; k < nprof; k++) {
                if (score[k] != best_score[k]) {
                    better = score[k] > best_score[k];
                    break;
                }
            }
        }
        if (better) {
            found = 1;
            memcpy(best_score, score, sizeof(score));
            *out_start = start;
            *out_size = size;
        }
    }
    return found;
}

static int offers_placement(const cJSON *prof, unsigned int start, unsigned int size)
{
    const cJSON *pl;
    unsigned int s, z;
    cJSON_ArrayForEach(pl, sim_jpath(prof, "placements"))
    {
        if (placement_of(pl, &s, &z) && s == start && z == size)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ MIG mode */

SIM_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jbool(r.g, "mig.supported", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = (unsigned int)sim_jint(r.g, "mig.current", 0);
    *pendingMode = (unsigned int)sim_jint(r.g, "mig.pending", *currentMode);
    return NVML_SUCCESS;
}

/* a GPU is held when a live driver client (clients[], kill(pid, 0) succeeds) or a compute process uses it */
static int gpu_is_held(const cJSON *g)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, sim_jpath(g_sim_root, "clients"))
    {
        long long pid = sim_jint(c, "pid", 0);
        if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM))
            return 1;
    }
    return cJSON_GetArraySize(sim_jpath(g, "processes")) > 0;
}

SIM_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *mig;
    long long current;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);

    if (rc != NVML_SUCCESS)
        return rc;
    if (!activationStatus || mode > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jbool(r.g, "mig.supported", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    rc = sim_write_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_reresolve(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    mig = sim_jpath(r.g, "mig");
    current = sim_jint(mig, "current", 0);
    if (mode == 0 && cJSON_GetArraySize(sim_jpath(mig, "gpu_instances")) > 0)
        return NVML_ERROR_IN_USE;
    sim_jset_num(mig, "pending", mode);
    if ((long long)mode == current) {
        *activationStatus = NVML_SUCCESS;
    } else if (!sim_jbool(mig, "reset_required_for_mode", 1) && !gpu_is_held(r.g)) {
        sim_jset_num(mig, "current", mode);
        *activationStatus = NVML_SUCCESS;
    } else {
        *activationStatus = NVML_ERROR_IN_USE;
    }
    return sim_commit_devfiles();
}

/* ------------------------------------------------------------------------------------ profile info */

static nvmlReturn_t check_mig_capable(const sim_ref_t *r)
{
    return sim_jbool(r->g, "mig.supported", 0) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

static void fill_name(char *dst, const cJSON *prof)
{
    const char *name = sim_jstr(prof, "name");
    snprintf(dst, NVML_DEVICE_NAME_V2_BUFFER_SIZE, "MIG %s", name ? name : "");
}

#define GI_COMMON_FIELDS(info, prof)                                                  \
    do {                                                                              \
        (info)->id = (unsigned int)sim_jint(prof, "id", 0);                           \
        (info)->sliceCount = (unsigned int)sim_jint(prof, "slices", 0);               \
        (info)->instanceCount = (unsigned int)sim_jint(prof, "instances", 0);         \
        (info)->multiprocessorCount = (unsigned int)sim_jint(prof, "sms", 0);         \
        (info)->copyEngineCount = (unsigned int)sim_jint(prof, "copy_engines", 0);    \
        (info)->decoderCount = (unsigned int)sim_jint(prof, "decoders", 0);           \
        (info)->encoderCount = (unsigned int)sim_jint(prof, "encoders", 0);           \
        (info)->jpegCount = (unsigned int)sim_jint(prof, "jpegs", 0);                 \
        (info)->ofaCount = (unsigned int)sim_jint(prof, "ofas", 0);                   \
        (info)->memorySizeMB = (unsigned long long)sim_jint(prof, "memory_mib", 0);   \
    } while (0)

/* v2 and v3 share a size and differ in layout: the version word decides */
static nvmlReturn_t fill_gi_info_versioned(void *info, const cJSON *prof)
{
    unsigned int version = *(unsigned int *)info;
    if (version == nvmlGpuInstanceProfileInfo_v2) {
        nvmlGpuInstanceProfileInfo_v2_t *v2 = info;
        GI_COMMON_FIELDS(v2, prof);
        v2->isP2pSupported = (unsigned int)sim_jint(prof, "p2p", 0);
        fill_name(v2->name, prof);
        v2->version = 0; /* the real driver hands a v2 struct back with version 0 (H200, 580.159.04 getter dump) */
        return NVML_SUCCESS;
    }
    if (version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = info;
        GI_COMMON_FIELDS(v3, prof);
        v3->capabilities = sim_jint(prof, "p2p", 0) ? NVML_GPU_INSTANCE_PROFILE_CAPS_P2P : 0U;
        fill_name(v3->name, prof);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                         nvmlGpuInstanceProfileInfo_t *info)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = check_mig_capable(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    prof = gi_profile_by_index(r.g, profile);
    if (!prof)
        return NVML_ERROR_NOT_SUPPORTED;
    GI_COMMON_FIELDS(info, prof);
    info->isP2pSupported = (unsigned int)sim_jint(prof, "p2p", 0);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile, void *info)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = check_mig_capable(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    prof = gi_profile_by_index(r.g, profile);
    if (!prof)
        return NVML_ERROR_NOT_SUPPORTED;
    return fill_gi_info_versioned(info, prof);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId, void *info)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = check_mig_capable(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    prof = sim_gi_profile_by_id(r.g, profileId);
    if (!prof)
        return unoffered_profile(r.g, profileId) ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INVALID_ARGUMENT;
    return fill_gi_info_versioned(info, prof);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                                   nvmlGpuInstancePlacement_t *placements,
                                                                   unsigned int *count)
{
    SIM_LOCKED;
    sim_ref_t r;
    const cJSON *prof, *pl;
    unsigned int n = 0, start, size;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = check_mig_capable(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    prof = sim_gi_profile_by_id(r.g, profileId);
    if (!prof)
        return NVML_ERROR_INVALID_ARGUMENT;
    cJSON_ArrayForEach(pl, sim_jpath(prof, "placements"))
    {
        if (!placement_of(pl, &start, &size))
            continue;
        if (placements) {
            placements[n].start = start;
            placements[n].size = size;
        }
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

/* resolve + MIG on + known profile id: the common prologue of capacity, create and list. `query`: a read that
 * the real driver answers with MIG off too (the H200 on 580 lists its profiles and their capacity with MIG
 * disabled: mig_lgip.txt and the getter dump); only models with a real transcript do so here. */
static nvmlReturn_t mig_profile_q(const char *fn, nvmlDevice_t device, unsigned int profileId, sim_ref_t *r,
                                  cJSON **prof, int query)
{
    nvmlReturn_t rc = sim_dev(fn, device, 0, r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!sim_mig_enabled(r->g) && !(query && sim_jbool(r->g, "mig.supported", 0) && sim_model_nvml(r->g)))
        return NVML_ERROR_NOT_SUPPORTED;
    *prof = sim_gi_profile_by_id(r->g, profileId);
    if (*prof)
        return NVML_SUCCESS;
    return query && unoffered_profile(r->g, profileId) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t mig_profile(const char *fn, nvmlDevice_t device, unsigned int profileId, sim_ref_t *r,
                                cJSON **prof)
{
    return mig_profile_q(fn, device, profileId, r, prof, 0);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                               unsigned int *count)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof;
    nvmlReturn_t rc = mig_profile_q(__func__, device, profileId, &r, &prof, 1);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)capacity(r.g, prof, used_slots(r.g), 0);
    return NVML_SUCCESS;
}

static int cmp_by_id(const void *a, const void *b)
{
    long long x = sim_jint(*(cJSON *const *)a, "id", 0), y = sim_jint(*(cJSON *const *)b, "id", 0);
    return (x > y) - (x < y);
}

/* append a GPU-instance object, then re-link the array sorted by id (cJSON 1.7.15's
 * cJSON_InsertItemInArray drops items in the middle of an array, so it is not used) */
static void insert_sorted(cJSON *array, cJSON *item)
{
    cJSON *items[SIM_MAX_GI * 4];
    int n = 0, i;
    cJSON_AddItemToArray(array, item);
    while (array->child && n < (int)(sizeof(items) / sizeof(items[0])))
        items[n++] = cJSON_DetachItemViaPointer(array, array->child);
    qsort(items, (size_t)n, sizeof(items[0]), cmp_by_id);
    for (i = 0; i < n; i++)
        cJSON_AddItemToArray(array, items[i]);
}

static nvmlReturn_t create_gi(const char *fn, nvmlDevice_t device, unsigned int profileId,
                              const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *gpuInstance)
{
    sim_ref_t r;
    cJSON *prof, *gis, *obj;
    unsigned int start = 0, size = 1, id;
    nvmlReturn_t rc = mig_profile(fn, device, profileId, &r, &prof);

    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpuInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (placement && !offers_placement(prof, placement->start, placement->size))
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = sim_write_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_reresolve(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!sim_mig_enabled(r.g))
        return NVML_ERROR_NOT_SUPPORTED;
    prof = sim_gi_profile_by_id(r.g, profileId);
    if (!prof)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (count_instances(r.g, profileId) >= sim_jint(prof, "instances", 0) || media_conflict(r.g, prof))
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (placement) {
        start = placement->start;
        size = placement->size;
        if (used_slots(r.g) & slot_mask(start, size))
            return NVML_ERROR_INSUFFICIENT_RESOURCES;
    } else if (!choose_placement(r.g, prof, &start, &size)) {
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    id = axis_slots(r.g) / size - 1 + start / size;
    if (id >= SIM_MAX_GI)
        return NVML_ERROR_UNKNOWN;
    gis = sim_jpath(r.g, "mig.gpu_instances");
    if (!cJSON_IsArray(gis)) {
        cJSON *mig = sim_jpath(r.g, "mig");
        cJSON_DeleteItemFromObjectCaseSensitive(mig, "gpu_instances");
        gis = cJSON_AddArrayToObject(mig, "gpu_instances");
    }
    obj = cJSON_CreateObject();
    cJSON_AddNumberToObject(obj, "id", id);
    cJSON_AddNumberToObject(obj, "profile_id", profileId);
    cJSON_AddNumberToObject(obj, "start", start);
    cJSON_AddNumberToObject(obj, "size", size);
    cJSON_AddArrayToObject(obj, "compute_instances");
    insert_sorted(gis, obj);
    rc = sim_commit_devfiles();
    if (rc == NVML_SUCCESS)
        *gpuInstance = &g_sim_gi[r.gpu][id];
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                                 nvmlGpuInstance_t *gpuInstance)
{
    SIM_LOCKED;
    return create_gi(__func__, device, profileId, NULL, gpuInstance);
}

SIM_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                              const nvmlGpuInstancePlacement_t *placement,
                                                              nvmlGpuInstance_t *gpuInstance)
{
    SIM_LOCKED;
    if (!placement) {
        sim_ref_t r;
        nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
        return rc != NVML_SUCCESS ? rc : NVML_ERROR_INVALID_ARGUMENT;
    }
    return create_gi(__func__, device, profileId, placement, gpuInstance);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                               nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof;
    const cJSON *gi;
    unsigned int n = 0, max;
    nvmlReturn_t rc = mig_profile(__func__, device, profileId, &r, &prof);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpuInstances || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    max = (unsigned int)sim_jint(prof, "instances", 0);
    cJSON_ArrayForEach(gi, sim_jpath(r.g, "mig.gpu_instances"))
    {
        long long id = sim_jint(gi, "id", -1);
        if (sim_jint(gi, "profile_id", -1) != (long long)profileId || id < 0 || id >= SIM_MAX_GI || n >= max)
            continue;
        gpuInstances[n++] = &g_sim_gi[r.gpu][id];
    }
    *count = n;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpuInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_mig_enabled(r.g)) /* the real H200 on 580: NOT_FOUND for every id with MIG off (getter dump) */
        return sim_jbool(r.g, "mig.supported", 0) && sim_model_nvml(r.g) ? NVML_ERROR_NOT_FOUND
                                                                          : NVML_ERROR_NOT_SUPPORTED;
    if (id >= SIM_MAX_GI || !sim_find_by_id(sim_jpath(r.g, "mig.gpu_instances"), id))
        return NVML_ERROR_NOT_FOUND;
    *gpuInstance = &g_sim_gi[r.gpu][id];
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_gi(__func__, gpuInstance, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    info->device = &g_sim_dev[r.gpu];
    info->id = (unsigned int)r.gi;
    info->profileId = (unsigned int)sim_jint(r.gio, "profile_id", 0);
    info->placement.start = (unsigned int)sim_jint(r.gio, "start", 0);
    info->placement.size = (unsigned int)sim_jint(r.gio, "size", 0);
    return NVML_SUCCESS;
}

static int has_processes(const cJSON *g, int gi, int ci)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, sim_jpath(g, "processes"))
    {
        if (sim_jint(p, "gi_id", -1) == gi && (ci < 0 || sim_jint(p, "ci_id", -1) == ci))
            return 1;
    }
    return 0;
}

SIM_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *gis;
    const cJSON *it;
    int i = 0;
    nvmlReturn_t rc = sim_gi(__func__, gpuInstance, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_write_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_reresolve(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (cJSON_GetArraySize(sim_jpath(r.gio, "compute_instances")) > 0 || has_processes(r.g, r.gi, -1))
        return NVML_ERROR_IN_USE;
    gis = sim_jpath(r.g, "mig.gpu_instances");
    cJSON_ArrayForEach(it, gis)
    {
        if (it == r.gio)
            break;
        i++;
    }
    cJSON_DeleteItemFromArray(gis, i);
    return sim_commit_devfiles();
}

int sim_gi_has_processes(const cJSON *g, int gi, int ci)
{
    return has_processes(g, gi, ci);
}
