/*
 * nvmlsim_fabric.c - the GPU fabric (NVLink through NVSwitches) as NVML reports it per GPU:
 * nvmlDeviceGetGpuFabricInfo (the v1 struct) and nvmlDeviceGetGpuFabricInfoV (v2 with the health mask, v3 with the
 * health summary), answered from the state and the simulated fabric software that runs:
 *
 *   - Before Hopper (architecture < 9): NVML_ERROR_NOT_SUPPORTED. INFERRED: the NVML reference calls the GPU fabric
 *     "for Hopper or newer"; no transcript of the call on an Ampere or older GPU has been seen (nvidia-smi prints N/A
 *     for the fabric of an A100, A100_SXM4_40GB__xml__1, which fits either answer).
 *   - Hopper and newer without a fabric (no NVSwitch in the state and not a multi-node tray): SUCCESS with state
 *     NVML_GPU_FABRIC_STATE_NOT_SUPPORTED (0), status 0, clique 0, an all-zero cluster UUID and health mask 0. Seen on
 *     a real H200 passed through to a VM, driver 580.159.04 (ground truth h200-sxm-passthrough-r580,
 *     nvml/getters-nvidia-ml-py-13.615.71.jsonl: both calls OK, every field 0), and on an H100 PCIe
 *     (leptonai/gpud #1147: "state=Not Supported" from a successful call).
 *   - No live nv-fabricmanager among the state's clients: "Not Started".
 *   - NVLink 5 GPUs (Blackwell, nvlink.version >= 5) reach their switches through the NVLink subnet manager: with
 *     the fabric manager but no live nvlsm client the fabric stays "In Progress" (what NVIDIA's fabric manager
 *     guide describes for fourth-generation NVSwitch systems and gpu-operator #2781 shows without NVLSM).
 *   - The fault fabric-stuck (gpusim fault inject fabric-stuck, the GPU's "fabric_stuck") holds one GPU at
 *     "In Progress" whatever runs.
 *   - A single-node NVSwitch system (HGX H100/H200/B200) then completes: status Success, clique id 0, an all-zero
 *     cluster UUID, and a health mask and summary of 0 (every field Not Supported: nvidia-smi prints N/A for each).
 *     Public transcript H100_SXM_HGX__xml__1 (NVIDIA/k8s-test-infra qx-h100.xml, 8x H100 80GB HBM3, driver
 *     580.105.08: Completed, Success, cliqueId 0, clusterUuid 00000000-..., every health line N/A); H200_SXM__q__1
 *     (driver 550.90.12, the same clique and UUID); meta-pytorch/torchcomms #1385.
 *   - A multi-node NVLink domain (a GB200/GB300 NVL72 compute tray: the state's "fabric": {"multinode": true}; its
 *     NVSwitches and their fabric management sit in the switch trays, outside this host) completes with a clique id
 *     and a cluster UUID that are not zero: fabric.clique_id / fabric.cluster_uuid when the state gives them, else
 *     both derived from the host's first GPU UUID (the same on every GPU of the host); a health summary Healthy and
 *     a health mask with bandwidth Full, route recovery, route unhealthy and access timeout recovery False and
 *     incorrect configuration Not Supported, or degraded bandwidth (summary Limited Capacity) while one of the
 *     GPU's NVLinks is down. Public transcript GB200__xml__1 (NVIDIA/k8s-test-infra qx-gb200.xml, 4x GB200, driver
 *     580.173.02: Completed, Success, cliqueId 2, clusterUuid 00000001-..., summary Healthy, bandwidth Full,
 *     incorrect_configuration N/A). Degraded bandwidth while a link is down is INFERRED from nvml.h's mask.
 *
 * The structs are nvml.h's; gen_layout.py checks them against the pinned pynvml (NVMLSIM_FABRIC_TYPES below).
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>

#include "nvmlsim.h"

#define NVML_GPU_FABRIC_UUID_LEN 16
typedef unsigned char nvmlGpuFabricState_t; /* nvml.h: unsigned char (pynvml: c_uint at the same offset) */

typedef struct nvmlGpuFabricInfo_st {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

typedef struct nvmlGpuFabricInfo_v2_st {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

typedef struct nvmlGpuFabricInfo_v3_st {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;

#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(nvmlGpuFabricInfo_v2_t, 2)
#define nvmlGpuFabricInfo_v3 NVML_STRUCT_VERSION(nvmlGpuFabricInfo_v3_t, 3)

/* the sizes and offsets of the three structs and the two version words, against pynvml's ctypes classes */
#define NVMLSIM_FABRIC_TYPES 1
#include "layout_asserts.h"

#define FABRIC_NOT_SUPPORTED 0
#define FABRIC_NOT_STARTED 1
#define FABRIC_IN_PROGRESS 2
#define FABRIC_COMPLETED 3
#define ARCH_HOPPER 9
#define NVLINK_WITH_SUBNET_MANAGER 5

/* health mask fields (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*): value << shift */
#define HEALTH_TRUE 1U
#define HEALTH_FALSE 2U
#define HEALTH_SHIFT_DEGRADED_BW 0
#define HEALTH_SHIFT_ROUTE_RECOVERY 2
#define HEALTH_SHIFT_ROUTE_UNHEALTHY 4
#define HEALTH_SHIFT_ACCESS_TIMEOUT_RECOVERY 6
#define HEALTH_SUMMARY_HEALTHY 1
#define HEALTH_SUMMARY_LIMITED_CAPACITY 3

typedef struct {
    unsigned char cluster_uuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int clique_id;
    unsigned char state;
    unsigned int health_mask;
    unsigned char health_summary;
} fabric_t;

/* a live process of this name among the state's driver clients (the fabric manager, the subnet manager) */
static int client_running(const char *want)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, sim_jpath(g_sim_root, "clients"))
    {
        const char *name = sim_jstr(c, "name");
        long long pid = sim_jint(c, "pid", 0);
        if (name && strcmp(name, want) == 0 && pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM))
            return 1;
    }
    return 0;
}

/* FNV-1a over a string, with a seed so that two derivations of one text differ */
static unsigned int fnv1a(const char *text, unsigned int seed)
{
    unsigned int h = 2166136261U ^ seed;
    for (; text && *text; text++) {
        h ^= (unsigned char)*text;
        h *= 16777619U;
    }
    return h;
}

/* a UUID text (32 hex digits, dashes anywhere) -> 16 bytes in out; 0 (out untouched) when it is not one */
static int parse_uuid(const char *text, unsigned char out[NVML_GPU_FABRIC_UUID_LEN])
{
    unsigned char bytes[NVML_GPU_FABRIC_UUID_LEN] = {0};
    unsigned int n = 0;
    int high = 1;
    if (!text)
        return 0;
    for (; *text; text++) {
        int v;
        if (*text == '-')
            continue;
        if (*text >= '0' && *text <= '9')
            v = *text - '0';
        else if (*text >= 'a' && *text <= 'f')
            v = *text - 'a' + 10;
        else if (*text >= 'A' && *text <= 'F')
            v = *text - 'A' + 10;
        else
            return 0;
        if (n == NVML_GPU_FABRIC_UUID_LEN)
            return 0;
        if (high)
            bytes[n] = (unsigned char)(v << 4);
        else
            bytes[n++] |= (unsigned char)v;
        high = !high;
    }
    if (n != NVML_GPU_FABRIC_UUID_LEN)
        return 0;
    memcpy(out, bytes, sizeof(bytes));
    return 1;
}

/* The cluster UUID and clique id of a multi-node tray's fabric: the state's fabric.cluster_uuid and
 * fabric.clique_id where it gives them (a replayed host, trays of one domain), else from the host's first GPU's UUID,
 * never zero. */
static void fabric_identity(fabric_t *f)
{
    const char *seed = sim_jstr(cJSON_GetArrayItem(sim_jpath(g_sim_root, "gpus"), 0), "uuid");
    unsigned int i;
    for (i = 0; i < NVML_GPU_FABRIC_UUID_LEN; i += 4) {
        unsigned int h = fnv1a(seed ? seed : "gpusim", i + 1);
        memcpy(&f->cluster_uuid[i], &h, 4);
    }
    f->cluster_uuid[6] = (unsigned char)((f->cluster_uuid[6] & 0x0f) | 0x40); /* an RFC 4122 version-4 UUID */
    f->cluster_uuid[8] = (unsigned char)((f->cluster_uuid[8] & 0x3f) | 0x80);
    f->clique_id = fnv1a(seed ? seed : "gpusim", 0xc11) % 32767U + 1U;
    parse_uuid(sim_jstr(g_sim_root, "fabric.cluster_uuid"), f->cluster_uuid);
    f->clique_id = (unsigned int)sim_jint(g_sim_root, "fabric.clique_id", (long long)f->clique_id);
}

static nvmlReturn_t fabric_read(const sim_ref_t *r, fabric_t *f)
{
    unsigned int links, up, degraded;
    int multinode = sim_jbool(g_sim_root, "fabric.multinode", 0);
    if (sim_jint(r->g, "architecture", 0) < ARCH_HOPPER)
        return NVML_ERROR_NOT_SUPPORTED; /* INFERRED (see the top of this file) */
    memset(f, 0, sizeof(*f));
    if (!multinode && sim_jint(g_sim_root, "nvswitch.count", 0) <= 0) {
        f->state = FABRIC_NOT_SUPPORTED; /* the real H200 in a VM, driver 580: success, every field 0 */
        return NVML_SUCCESS;
    }
    if (!multinode && !client_running("nv-fabricmanager")) {
        f->state = FABRIC_NOT_STARTED;
        f->status = NVML_ERROR_NOT_READY;
        return NVML_SUCCESS;
    }
    if (sim_jbool(r->g, "fabric_stuck", 0) ||
        (!multinode && sim_jint(r->g, "nvlink.version", 0) >= NVLINK_WITH_SUBNET_MANAGER &&
         !client_running("nvlsm"))) {
        f->state = FABRIC_IN_PROGRESS;
        f->status = NVML_ERROR_NOT_READY;
        return NVML_SUCCESS;
    }
    f->state = FABRIC_COMPLETED;
    f->status = NVML_SUCCESS;
    if (!multinode)
        return NVML_SUCCESS; /* one node: clique 0, zero cluster UUID, health Not Supported (H100_SXM_HGX__xml__1) */
    fabric_identity(f);
    links = (unsigned int)cJSON_GetArraySize(sim_jpath(r->g, "nvlink.links"));
    up = sim_nvlinks_up(r->g);
    degraded = up < links;
    f->health_mask = ((degraded ? HEALTH_TRUE : HEALTH_FALSE) << HEALTH_SHIFT_DEGRADED_BW) |
                     (HEALTH_FALSE << HEALTH_SHIFT_ROUTE_RECOVERY) | (HEALTH_FALSE << HEALTH_SHIFT_ROUTE_UNHEALTHY) |
                     (HEALTH_FALSE << HEALTH_SHIFT_ACCESS_TIMEOUT_RECOVERY);
    /* incorrect configuration stays 0, Not Supported: GB200__xml__1 prints N/A for it */
    f->health_summary = degraded ? HEALTH_SUMMARY_LIMITED_CAPACITY : HEALTH_SUMMARY_HEALTHY;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    SIM_LOCKED;
    sim_ref_t r;
    fabric_t f;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpuFabricInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = fabric_read(&r, &f);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(gpuFabricInfo, 0, sizeof(*gpuFabricInfo));
    memcpy(gpuFabricInfo->clusterUuid, f.cluster_uuid, sizeof(f.cluster_uuid));
    gpuFabricInfo->status = f.status;
    gpuFabricInfo->cliqueId = f.clique_id;
    gpuFabricInfo->state = f.state;
    return NVML_SUCCESS;
}

/* The versioned call: the caller sets version to nvmlGpuFabricInfo_v2 or _v3; any other answers
 * NVML_ERROR_ARGUMENT_VERSION_MISMATCH, as NVIDIA's library does. Only the caller's version's fields are written. */
SIM_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v3_t *gpuFabricInfo)
{
    SIM_LOCKED;
    sim_ref_t r;
    fabric_t f;
    unsigned int version;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpuFabricInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    version = gpuFabricInfo->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    rc = fabric_read(&r, &f);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(gpuFabricInfo, 0, version == nvmlGpuFabricInfo_v3 ? sizeof(nvmlGpuFabricInfo_v3_t)
                                                              : sizeof(nvmlGpuFabricInfo_v2_t));
    gpuFabricInfo->version = version;
    memcpy(gpuFabricInfo->clusterUuid, f.cluster_uuid, sizeof(f.cluster_uuid));
    gpuFabricInfo->status = f.status;
    gpuFabricInfo->cliqueId = f.clique_id;
    gpuFabricInfo->state = f.state;
    gpuFabricInfo->healthMask = f.health_mask;
    if (version == nvmlGpuFabricInfo_v3)
        gpuFabricInfo->healthSummary = f.health_summary;
    return NVML_SUCCESS;
}
