/*
 * nvmlsim_ci.c - compute instances inside GPU instances, and MIG device handles.
 *
 * Compute-instance profiles come from mig.ci_profiles keyed by the GPU instance's compute-slice count;
 * placements are on the GPU instance's compute-slice axis. CI ids are the lowest free id inside the GI.
 * A MIG device is one compute instance; its handle is an nvmlDevice_t from g_sim_migdev, its UUID
 * "MIG-" + uuid5(namespace = the GPU's UUID, name = "<gi>/<ci>") unless the state stores one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvmlsim.h"
#include "nvmlsim_devfiles.h"

cJSON *sim_ci_table(const cJSON *g, const cJSON *gi_profile)
{
    char key[16];
    snprintf(key, sizeof(key), "%lld", sim_jint(gi_profile, "slices", 0));
    return cJSON_GetObjectItemCaseSensitive(sim_jpath(g, "mig.ci_profiles"), key);
}

static cJSON *ci_profile_by_index(const cJSON *table, unsigned int index)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, table)
    {
        if (sim_jint(p, "index", -1) == (long long)index)
            return (cJSON *)p;
    }
    return NULL;
}

cJSON *sim_ci_profile_by_id(const cJSON *table, unsigned int id)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, table)
    {
        if (sim_jint(p, "id", -1) == (long long)id)
            return (cJSON *)p;
    }
    return NULL;
}

static cJSON *gi_profile_of(const sim_ref_t *r)
{
    return sim_gi_profile_by_id(r->g, (unsigned int)sim_jint(r->gio, "profile_id", -1));
}

/* "3g.40gb" for a CI that fills its GI, "1c.3g.40gb" otherwise */
static void device_profile_name(const cJSON *gi_prof, long long ci_slices, char *buf, size_t len)
{
    const char *gname = sim_jstr(gi_prof, "name");
    if (!gname)
        gname = "";
    if (ci_slices == sim_jint(gi_prof, "slices", 0))
        snprintf(buf, len, "%s", gname);
    else
        snprintf(buf, len, "%lldc.%s", ci_slices, gname);
}

void sim_mig_device_name(const cJSON *g, const cJSON *gio, const cJSON *cio, char *buf, size_t len)
{
    char dev[128];
    const cJSON *gi_prof = sim_gi_profile_by_id(g, (unsigned int)sim_jint(gio, "profile_id", -1));
    const char *gpu_name = sim_jstr(g, "name");
    device_profile_name(gi_prof, sim_jint(cio, "size", 0), dev, sizeof(dev));
    snprintf(buf, len, "%s MIG %s", gpu_name ? gpu_name : "", dev);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void uuid5_mig(const char *gpu_uuid, int gi, int ci, char *buf, size_t len)
{
    unsigned char data[64], digest[20];
    int n = 0, hi = -1;
    const char *p = gpu_uuid ? gpu_uuid : "";
    int name_len;

    memset(data, 0, 16);
    if (strncmp(p, "GPU-", 4) == 0)
        p += 4;
    for (; *p && n < 16; p++) {
        int v = hexval(*p);
        if (v < 0)
            continue;
        if (hi < 0) {
            hi = v;
        } else {
            data[n++] = (unsigned char)(hi << 4 | v);
            hi = -1;
        }
    }
    name_len = snprintf((char *)data + 16, sizeof(data) - 16, "%d/%d", gi, ci);
    sim_sha1(data, 16 + (size_t)name_len, digest);
    digest[6] = (unsigned char)((digest[6] & 0x0F) | 0x50);
    digest[8] = (unsigned char)((digest[8] & 0x3F) | 0x80);
    snprintf(buf, len,
             "MIG-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", digest[0], digest[1],
             digest[2], digest[3], digest[4], digest[5], digest[6], digest[7], digest[8], digest[9], digest[10],
             digest[11], digest[12], digest[13], digest[14], digest[15]);
}

void sim_mig_uuid(const cJSON *g, int gi, int ci, char *buf, size_t len)
{
    const cJSON *gio = sim_find_by_id(sim_jpath(g, "mig.gpu_instances"), (unsigned int)gi);
    const cJSON *cio = sim_find_by_id(sim_jpath(gio, "compute_instances"), (unsigned int)ci);
    const char *stored = sim_jstr(cio, "uuid");
    if (stored)
        snprintf(buf, len, "%s", stored);
    else
        uuid5_mig(sim_jstr(g, "uuid"), gi, ci, buf, len);
}

static int cmp_pair(const void *a, const void *b)
{
    const int *x = a, *y = b;
    return x[0] != y[0] ? (x[0] > y[0]) - (x[0] < y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* MIG devices of a GPU ordered by GI id, then CI id */
int sim_mig_devices(const cJSON *g, int *gis, int *cis, int max)
{
    int pairs[SIM_MAX_GI * SIM_MAX_CI][2], n = 0, i;
    const cJSON *gi, *ci;
    if (!sim_mig_enabled(g))
        return 0;
    cJSON_ArrayForEach(gi, sim_jpath(g, "mig.gpu_instances"))
    {
        long long gid = sim_jint(gi, "id", -1);
        cJSON_ArrayForEach(ci, sim_jpath(gi, "compute_instances"))
        {
            long long cid = sim_jint(ci, "id", -1);
            if (gid < 0 || gid >= SIM_MAX_GI || cid < 0 || cid >= SIM_MAX_CI || n >= SIM_MAX_GI * SIM_MAX_CI)
                continue;
            pairs[n][0] = (int)gid;
            pairs[n][1] = (int)cid;
            n++;
        }
    }
    qsort(pairs, (size_t)n, sizeof(pairs[0]), cmp_pair);
    for (i = 0; i < n && i < max; i++) {
        gis[i] = pairs[i][0];
        cis[i] = pairs[i][1];
    }
    return n < max ? n : max;
}

/* ------------------------------------------------------------------------------- CI profile info */

static int placement_of(const cJSON *pl, unsigned int *start, unsigned int *size)
{
    if (cJSON_GetArraySize(pl) != 2)
        return 0;
    *start = (unsigned int)cJSON_GetArrayItem(pl, 0)->valueint;
    *size = (unsigned int)cJSON_GetArrayItem(pl, 1)->valueint;
    return *size > 0 && *start + *size <= 32;
}

#define CI_COMMON_FIELDS(info, prof, gi_prof)                                                               \
    do {                                                                                                    \
        (info)->id = (unsigned int)sim_jint(prof, "id", 0);                                                 \
        (info)->sliceCount = (unsigned int)sim_jint(prof, "slices", 0);                                     \
        (info)->instanceCount = (unsigned int)sim_jint(prof, "instances", 0);                               \
        (info)->multiprocessorCount = (unsigned int)(sim_jint(prof, "slices", 0) == sim_jint(gi_prof, "slices", -1) \
                                                         ? sim_jint(gi_prof, "sms", 0)                      \
                                                         : sim_jint(prof, "sms", 0));                       \
        (info)->sharedCopyEngineCount = (unsigned int)sim_jint(gi_prof, "copy_engines", 0);                 \
        (info)->sharedDecoderCount = (unsigned int)sim_jint(gi_prof, "decoders", 0);                        \
        (info)->sharedEncoderCount = (unsigned int)sim_jint(gi_prof, "encoders", 0);                        \
        (info)->sharedJpegCount = (unsigned int)sim_jint(gi_prof, "jpegs", 0);                              \
        (info)->sharedOfaCount = (unsigned int)sim_jint(gi_prof, "ofas", 0);                                \
    } while (0)

static void ci_name(char *dst, const cJSON *prof, const cJSON *gi_prof)
{
    char dev[128];
    device_profile_name(gi_prof, sim_jint(prof, "slices", 0), dev, sizeof(dev));
    snprintf(dst, NVML_DEVICE_NAME_V2_BUFFER_SIZE, "MIG %s", dev);
}

/* common prologue: resolve the GI, check the enum arguments, find the CI profile by index */
static nvmlReturn_t ci_profile_lookup(const char *fn, nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                      unsigned int engProfile, const void *info, sim_ref_t *r, cJSON **prof,
                                      cJSON **gi_prof)
{
    nvmlReturn_t rc = sim_gi(fn, gpuInstance, r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *gi_prof = gi_profile_of(r);
    *prof = ci_profile_by_index(sim_ci_table(r->g, *gi_prof), profile);
    return *prof ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                                  unsigned int engProfile,
                                                                  nvmlComputeInstanceProfileInfo_t *info)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof, *gi_prof;
    nvmlReturn_t rc = ci_profile_lookup(__func__, gpuInstance, profile, engProfile, info, &r, &prof, &gi_prof);
    if (rc != NVML_SUCCESS)
        return rc;
    CI_COMMON_FIELDS(info, prof, gi_prof);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance,
                                                                   unsigned int profile, unsigned int engProfile,
                                                                   void *info)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof, *gi_prof;
    unsigned int version;
    nvmlReturn_t rc = ci_profile_lookup(__func__, gpuInstance, profile, engProfile, info, &r, &prof, &gi_prof);
    if (rc != NVML_SUCCESS)
        return rc;
    version = *(unsigned int *)info;
    if (version == nvmlComputeInstanceProfileInfo_v2) {
        nvmlComputeInstanceProfileInfo_v2_t *v2 = info;
        CI_COMMON_FIELDS(v2, prof, gi_prof);
        ci_name(v2->name, prof, gi_prof);
        return NVML_SUCCESS;
    }
    if (version == nvmlComputeInstanceProfileInfo_v3) {
        nvmlComputeInstanceProfileInfo_v3_t *v3 = info;
        CI_COMMON_FIELDS(v3, prof, gi_prof);
        ci_name(v3->name, prof, gi_prof);
        v3->capabilities = 0;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

/* resolve the GI and find a CI profile by id */
static nvmlReturn_t ci_profile_by_id_of(const char *fn, nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                        sim_ref_t *r, cJSON **prof)
{
    nvmlReturn_t rc = sim_gi(fn, gpuInstance, r);
    if (rc != NVML_SUCCESS)
        return rc;
    *prof = sim_ci_profile_by_id(sim_ci_table(r->g, gi_profile_of(r)), profileId);
    return *prof ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
                                                                         unsigned int profileId,
                                                                         nvmlComputeInstancePlacement_t *placements,
                                                                         unsigned int *count)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof;
    const cJSON *pl;
    unsigned int n = 0, start, size;
    nvmlReturn_t rc = ci_profile_by_id_of(__func__, gpuInstance, profileId, &r, &prof);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
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

static unsigned int ci_used(const cJSON *gio)
{
    const cJSON *ci;
    unsigned int mask = 0;
    cJSON_ArrayForEach(ci, sim_jpath(gio, "compute_instances"))
    {
        unsigned int s = (unsigned int)sim_jint(ci, "start", 0), z = (unsigned int)sim_jint(ci, "size", 0);
        if (z > 0 && s + z <= 32)
            mask |= ((z >= 32 ? ~0U : (1U << z) - 1U) << s);
    }
    return mask;
}

static int ci_count(const cJSON *gio, long long profile_id)
{
    const cJSON *ci;
    int n = 0;
    cJSON_ArrayForEach(ci, sim_jpath(gio, "compute_instances"))
    {
        if (sim_jint(ci, "profile_id", -1) == profile_id)
            n++;
    }
    return n;
}

static unsigned int ci_mask(unsigned int start, unsigned int size)
{
    return (size >= 32 ? ~0U : (1U << size) - 1U) << start;
}

/* free placements of prof, counted greedily; the first one is returned in *first */
static int ci_capacity(const cJSON *gio, const cJSON *prof, unsigned int *first_start, unsigned int *first_size)
{
    const cJSON *pl;
    unsigned int mask = ci_used(gio), start, size;
    int cap = (int)sim_jint(prof, "instances", 0) - ci_count(gio, sim_jint(prof, "id", -1)), n = 0;
    if (cap <= 0)
        return 0;
    cJSON_ArrayForEach(pl, sim_jpath(prof, "placements"))
    {
        if (!placement_of(pl, &start, &size) || (mask & ci_mask(start, size)))
            continue;
        if (n == 0 && first_start) {
            *first_start = start;
            *first_size = size;
        }
        mask |= ci_mask(start, size);
        if (++n == cap)
            break;
    }
    return n;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                        unsigned int profileId, unsigned int *count)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof;
    nvmlReturn_t rc = ci_profile_by_id_of(__func__, gpuInstance, profileId, &r, &prof);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)ci_capacity(r.gio, prof, NULL, NULL);
    return NVML_SUCCESS;
}

static int offers(const cJSON *prof, unsigned int start, unsigned int size)
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

static nvmlReturn_t create_ci(const char *fn, nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                              const nvmlComputeInstancePlacement_t *placement, nvmlComputeInstance_t *computeInstance)
{
    sim_ref_t r;
    cJSON *prof, *cis, *obj;
    unsigned int start = 0, size = 0, used_ids = 0, id;
    const cJSON *it;
    char uuid[96];
    nvmlReturn_t rc = ci_profile_by_id_of(fn, gpuInstance, profileId, &r, &prof);

    if (rc != NVML_SUCCESS)
        return rc;
    if (!computeInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (placement && !offers(prof, placement->start, placement->size))
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = sim_write_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_reresolve(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    prof = sim_ci_profile_by_id(sim_ci_table(r.g, gi_profile_of(&r)), profileId);
    if (!prof)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (ci_count(r.gio, profileId) >= sim_jint(prof, "instances", 0))
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (placement) {
        start = placement->start;
        size = placement->size;
        if (ci_used(r.gio) & ci_mask(start, size))
            return NVML_ERROR_INSUFFICIENT_RESOURCES;
    } else if (ci_capacity(r.gio, prof, &start, &size) == 0) {
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    cis = sim_jpath(r.gio, "compute_instances");
    if (!cJSON_IsArray(cis)) {
        cJSON_DeleteItemFromObjectCaseSensitive(r.gio, "compute_instances");
        cis = cJSON_AddArrayToObject(r.gio, "compute_instances");
    }
    cJSON_ArrayForEach(it, cis)
    {
        long long cid = sim_jint(it, "id", -1);
        if (cid >= 0 && cid < SIM_MAX_CI)
            used_ids |= 1U << cid;
    }
    for (id = 0; id < SIM_MAX_CI && (used_ids & (1U << id)); id++)
        ;
    if (id >= SIM_MAX_CI)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    uuid5_mig(sim_jstr(r.g, "uuid"), r.gi, (int)id, uuid, sizeof(uuid));
    obj = cJSON_CreateObject();
    cJSON_AddNumberToObject(obj, "id", id);
    cJSON_AddNumberToObject(obj, "profile_id", profileId);
    cJSON_AddNumberToObject(obj, "start", start);
    cJSON_AddNumberToObject(obj, "size", size);
    cJSON_AddStringToObject(obj, "uuid", uuid);
    cJSON_AddItemToArray(cis, obj);
    rc = sim_commit_devfiles();
    if (rc == NVML_SUCCESS)
        *computeInstance = &g_sim_ci[r.gpu][r.gi][id];
    return rc;
}

SIM_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                          nvmlComputeInstance_t *computeInstance)
{
    SIM_LOCKED;
    return create_ci(__func__, gpuInstance, profileId, NULL, computeInstance);
}

SIM_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance,
                                                                       unsigned int profileId,
                                                                       const nvmlComputeInstancePlacement_t *placement,
                                                                       nvmlComputeInstance_t *computeInstance)
{
    SIM_LOCKED;
    if (!placement) {
        sim_ref_t r;
        nvmlReturn_t rc = sim_gi(__func__, gpuInstance, &r);
        return rc != NVML_SUCCESS ? rc : NVML_ERROR_INVALID_ARGUMENT;
    }
    return create_ci(__func__, gpuInstance, profileId, placement, computeInstance);
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                        nvmlComputeInstance_t *computeInstances, unsigned int *count)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *prof;
    const cJSON *ci;
    unsigned int n = 0, max;
    nvmlReturn_t rc = ci_profile_by_id_of(__func__, gpuInstance, profileId, &r, &prof);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!computeInstances || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    max = (unsigned int)sim_jint(prof, "instances", 0);
    cJSON_ArrayForEach(ci, sim_jpath(r.gio, "compute_instances"))
    {
        long long id = sim_jint(ci, "id", -1);
        if (sim_jint(ci, "profile_id", -1) != (long long)profileId || id < 0 || id >= SIM_MAX_CI || n >= max)
            continue;
        computeInstances[n++] = &g_sim_ci[r.gpu][r.gi][id];
    }
    *count = n;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                           nvmlComputeInstance_t *computeInstance)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_gi(__func__, gpuInstance, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!computeInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (id >= SIM_MAX_CI || !sim_find_by_id(sim_jpath(r.gio, "compute_instances"), id))
        return NVML_ERROR_NOT_FOUND;
    *computeInstance = &g_sim_ci[r.gpu][r.gi][id];
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                   nvmlComputeInstanceInfo_t *info)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_ci(__func__, computeInstance, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    info->device = &g_sim_dev[r.gpu];
    info->gpuInstance = &g_sim_gi[r.gpu][r.gi];
    info->id = (unsigned int)r.ci;
    info->profileId = (unsigned int)sim_jint(r.cio, "profile_id", 0);
    info->placement.start = (unsigned int)sim_jint(r.cio, "start", 0);
    info->placement.size = (unsigned int)sim_jint(r.cio, "size", 0);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *cis;
    const cJSON *it;
    int i = 0;
    nvmlReturn_t rc = sim_ci(__func__, computeInstance, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_write_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_reresolve(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (sim_gi_has_processes(r.g, r.gi, r.ci))
        return NVML_ERROR_IN_USE;
    cis = sim_jpath(r.gio, "compute_instances");
    cJSON_ArrayForEach(it, cis)
    {
        if (it == r.cio)
            break;
        i++;
    }
    cJSON_DeleteItemFromArray(cis, i);
    return sim_commit_devfiles();
}

/* ------------------------------------------------------------------------------ MIG device handles */

static unsigned int max_mig_devices(const cJSON *g)
{
    const cJSON *p;
    long long max = 0;
    cJSON_ArrayForEach(p, sim_jpath(g, "mig.gi_profiles"))
    {
        if (sim_jint(p, "instances", 0) > max)
            max = sim_jint(p, "instances", 0);
    }
    return (unsigned int)max;
}

SIM_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jbool(r.g, "mig.supported", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    *count = sim_mig_enabled(r.g) ? max_mig_devices(r.g) : 0U;
    sim_devfiles_ensure(); /* the driver writes them at load; the simulator on the first MIG query */
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                         nvmlDevice_t *migDevice)
{
    SIM_LOCKED;
    sim_ref_t r;
    int gis[SIM_MAX_GI * SIM_MAX_CI], cis[SIM_MAX_GI * SIM_MAX_CI], n;
    nvmlReturn_t rc = sim_dev(__func__, device, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (r.gi >= 0 || !migDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jbool(r.g, "mig.supported", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    /* MIG off: the real H200 on 580 finds no device at any index (NOT_FOUND, the getter dump); models without a
     * real transcript keep NOT_SUPPORTED */
    if (!sim_mig_enabled(r.g))
        return sim_model_nvml(r.g) ? NVML_ERROR_NOT_FOUND : NVML_ERROR_NOT_SUPPORTED;
    if (index >= max_mig_devices(r.g))
        return NVML_ERROR_INVALID_ARGUMENT;
    n = sim_mig_devices(r.g, gis, cis, SIM_MAX_GI * SIM_MAX_CI);
    if (index >= (unsigned int)n)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = &g_sim_migdev[r.gpu][gis[index]][cis[index]];
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(__func__, device, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!isMigDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = r.gi >= 0 ? 1U : 0U;
    return NVML_SUCCESS;
}

static nvmlReturn_t mig_id(const char *fn, nvmlDevice_t device, int want_ci, unsigned int *id)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(fn, device, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!id)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (r.gi < 0) /* a whole GPU: the real H200 on 580 says INVALID_ARGUMENT (the getter dump) */
        return sim_model_nvml(r.g) ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    *id = (unsigned int)(want_ci ? r.ci : r.gi);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return mig_id(__func__, device, 0, id);
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return mig_id(__func__, device, 1, id);
}

SIM_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(__func__, migDevice, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device || r.gi < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_sim_dev[r.gpu];
    return NVML_SUCCESS;
}
