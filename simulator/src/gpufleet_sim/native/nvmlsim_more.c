/*
 * nvmlsim_more.c - the entry points NVIDIA's own nvidia-smi (535) reads beyond the core set, answered from the
 * state: the export-table handshake, field values (power limits, temperature thresholds), display, accounting and
 * virtualization modes, graphics/MPS process lists, MIG device attributes, BAR1, current clocks, power
 * management mode and the system counts with a fixed answer. (The GPU fabric is in nvmlsim_fabric.c.)
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <time.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "nvmlsim.h"

/* NVIDIA's 535 nvidia-smi asks for an undocumented export table right after nvmlInitWithFlags and stops
 * ("Mismatch in versions") when the symbol is missing. It reads the table as a size (bytes, first 8) followed by
 * function pointers, and uses a slot only when the size is larger than the slot's offset: with a smaller table
 * it takes the same path as without one (its wrappers then return NVML_ERROR_UNINITIALIZED, 1).
 * Its process lists come only from here (the binary never resolves nvmlDeviceGet*RunningProcesses*): slot
 * 0x6a8 compute, 0x6b0 MPS compute, 0x6b8 graphics processes, each called as
 * (device, unsigned int *count [in: room, 500], sim_process_detail_t *records) by the function that fills
 * the "Processes" table, the -q process list and --query-compute-apps; slot 0xb8 (below) answers topo -m. The
 * table ends after slot 0x6b8; every other slot answers NVML_ERROR_UNINITIALIZED, which is what the binary's
 * wrappers return when the table is absent, so nothing else it shows changes (docs/simulator.md: outputs of every
 * preset compared with and without the table; tests/sim/test_real_nvidia_smi.py checks -q and the other views). */
#define EXPORT_SLOT_COMPUTE_PROCESSES 0x6a8
#define EXPORT_SLOT_MPS_PROCESSES 0x6b0
#define EXPORT_SLOT_GRAPHICS_PROCESSES 0x6b8
#define EXPORT_TABLE_BYTES (EXPORT_SLOT_GRAPHICS_PROCESSES + 8)

typedef void (*sim_slot_t)(void);

static nvmlReturn_t export_uninitialized(void)
{
    return NVML_ERROR_UNINITIALIZED;
}

static nvmlReturn_t export_compute_processes(nvmlDevice_t device, unsigned int *count, sim_process_detail_t *out)
{
    return sim_list_processes("nvmlDeviceGetComputeRunningProcesses", device, SIM_PROC_COMPUTE, count, NULL, out);
}

static nvmlReturn_t export_graphics_processes(nvmlDevice_t device, unsigned int *count, sim_process_detail_t *out)
{
    return sim_list_processes("nvmlDeviceGetGraphicsRunningProcesses", device, SIM_PROC_GRAPHICS, count, NULL,
                              out);
}

/* MPS clients are not in the state (docs/simulator.md): none, as nvmlDeviceGetMPSComputeRunningProcesses_v3 */
static nvmlReturn_t export_mps_processes(nvmlDevice_t device, unsigned int *count, sim_process_detail_t *out)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev("nvmlDeviceGetMPSComputeRunningProcesses", device, SIM_F_MIG_OK, &r);
    (void)out;
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}

/* Slot 0xb8: the link between two PCI devices in `nvidia-smi topo -m`, called as (bus_id_a, bus_id_b,
 * unsigned int *path) with the PCI bus id strings of two GPUs ("00000000:18:00.0") and *path an index into the
 * matrix's words: 0 PIX, 1 PXB, 2 PHB, 3 NODE, 4 SYS, 5 + n - 1 "NV<n>" (n = 1..18). The state has no PCIe tree
 * and places every GPU near every CPU of the host (nvmlDeviceGetCpuAffinity), so two GPUs meet through the host
 * bridges of one NUMA node (NODE) unless NVLinks join them: then NV<n>, n = sim_nvlinks_between (nvmlsim_topo.c:
 * the smaller count of links up, between GPUs that reach each other by nvlink.peers or a switched fabric). The binary then asks the public API
 * (nvmlDeviceGetNvLinkRemotePciInfo_v2, field NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT) and keeps this answer
 * when those report no link. The simulator's nvidia-smi draws the same matrix. */
#define EXPORT_SLOT_GPU_PATH 0xb8
#define PATH_NODE 3U
#define PATH_NV1 5U
#define PATH_MAX_NVLINKS 18U

unsigned int sim_nvlinks_up(const cJSON *g)
{
    const cJSON *link;
    unsigned int n = 0;
    cJSON_ArrayForEach(link, sim_jpath(g, "nvlink.links"))
    {
        if ((cJSON_IsNumber(link) && link->valuedouble != 0) || cJSON_IsTrue(link))
            n++;
    }
    return n;
}

/* the GPU whose PCI bus id is bus_id, through the per-GPU checks (lost GPU, injected faults) */
static nvmlReturn_t gpu_by_bus_id(const char *bus_id, cJSON **g)
{
    int i, n = sim_gpu_count();
    for (i = 0; i < n; i++) {
        const char *mine = sim_jstr(sim_gpu_json(i), "pci.bus_id");
        if (mine && strncasecmp(mine, bus_id, NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE) == 0) {
            nvmlReturn_t rc = sim_gpu_check(i, "nvmlDeviceGetTopologyCommonAncestor");
            *g = sim_gpu_json(i);
            return rc;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t export_gpu_path(const char *bus_id_a, const char *bus_id_b, unsigned int *path)
{
    SIM_LOCKED;
    cJSON *a, *b;
    unsigned int up;
    nvmlReturn_t rc = sim_begin("nvmlDeviceGetTopologyCommonAncestor");

    if (rc != NVML_SUCCESS)
        return rc;
    if (!bus_id_a || !bus_id_b || !path)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((rc = gpu_by_bus_id(bus_id_a, &a)) != NVML_SUCCESS || (rc = gpu_by_bus_id(bus_id_b, &b)) != NVML_SUCCESS)
        return rc;
    up = sim_nvlinks_between(a, b);
    if (up > PATH_MAX_NVLINKS)
        up = PATH_MAX_NVLINKS;
    *path = up ? PATH_NV1 + up - 1 : PATH_NODE;
    return NVML_SUCCESS;
}

static struct {
    unsigned long long size;
    sim_slot_t slot[EXPORT_TABLE_BYTES / 8 - 1];
} g_export_table;

SIM_API nvmlReturn_t nvmlInternalGetExportTable(const void **ppExportTable, const void *pExportTableId)
{
    SIM_LOCKED;
    size_t i;
    nvmlReturn_t rc = sim_begin(__func__);
    (void)pExportTableId;
    if (rc != NVML_SUCCESS)
        return rc;
    if (!ppExportTable)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g_export_table.size == 0) {
        for (i = 0; i < sizeof(g_export_table.slot) / sizeof(g_export_table.slot[0]); i++)
            g_export_table.slot[i] = (sim_slot_t)export_uninitialized;
        g_export_table.slot[EXPORT_SLOT_GPU_PATH / 8 - 1] = (sim_slot_t)export_gpu_path;
        g_export_table.slot[EXPORT_SLOT_COMPUTE_PROCESSES / 8 - 1] = (sim_slot_t)export_compute_processes;
        g_export_table.slot[EXPORT_SLOT_MPS_PROCESSES / 8 - 1] = (sim_slot_t)export_mps_processes;
        g_export_table.slot[EXPORT_SLOT_GRAPHICS_PROCESSES / 8 - 1] = (sim_slot_t)export_graphics_processes;
        g_export_table.size = EXPORT_TABLE_BYTES;
    }
    *ppExportTable = &g_export_table;
    return NVML_SUCCESS;
}

#define DEV_PROLOGUE(fn, device, flags)                       \
    SIM_LOCKED;                                               \
    sim_ref_t r;                                              \
    nvmlReturn_t rc = sim_dev((fn), (device), (flags), &r);   \
    if (rc != NVML_SUCCESS)                                   \
        return rc

/* ------------------------------------------------------------------------------------------ affinity */

/* The state has no NUMA layout: every GPU is near every online CPU of the host and its memory node 0 (one NUMA
 * node), which is what `nvidia-smi topo -m` prints in "CPU Affinity" / "NUMA Affinity". */
static nvmlReturn_t fill_bits(unsigned int size, unsigned long *set, long count)
{
    const unsigned int bits = (unsigned int)(8 * sizeof(unsigned long));
    unsigned int i;
    if (size == 0 || !set)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(set, 0, size * sizeof(unsigned long));
    for (i = 0; i < size * bits && (long)i < count; i++)
        set[i / bits] |= 1UL << (i % bits);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet)
{
    DEV_PROLOGUE(__func__, device, 0);
    (void)r;
    return fill_bits(cpuSetSize, cpuSet, sysconf(_SC_NPROCESSORS_ONLN));
}

/* scope 0 NODE, 1 SOCKET: one node, one socket - the same CPUs either way */
SIM_API nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
                                                         unsigned long *cpuSet, unsigned int scope)
{
    DEV_PROLOGUE(__func__, device, 0);
    (void)r;
    if (scope > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    return fill_bits(cpuSetSize, cpuSet, sysconf(_SC_NPROCESSORS_ONLN));
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
                                                 unsigned long *nodeSet, unsigned int scope)
{
    DEV_PROLOGUE(__func__, device, 0);
    (void)r;
    if (scope > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    return fill_bits(nodeSetSize, nodeSet, 1);
}

/* ---------------------------------------------------------------------------------------- field values */

/* nvml.h field ids nvidia-smi -q asks for */
#define FI_DEV_NVLINK_LINK_COUNT 91
#define FI_DEV_NVLINK_ERROR_DL_REPLAY 161   /* per link: the link's counters in nvlink.errors (nvidia-smi nvlink -e) */
#define FI_DEV_NVLINK_ERROR_DL_RECOVERY 162
#define FI_DEV_NVLINK_ERROR_DL_CRC 163
#define FI_DEV_NVLINK_GET_SPEED 164 /* per link (scope = link): MBps */
#define FI_DEV_NVLINK_GET_STATE 165 /* per link: 1 up, 0 down */
#define FI_DEV_POWER_MIN_LIMIT 187
#define FI_DEV_POWER_MAX_LIMIT 188
#define FI_DEV_POWER_DEFAULT_LIMIT 189
#define FI_DEV_POWER_CURRENT_LIMIT 190
#define FI_DEV_POWER_REQUESTED_LIMIT 192
#define FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT 193
#define FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT 194
#define FI_DEV_GET_GPU_RECOVERY_ACTION 230 /* nvmlDeviceGpuRecoveryAction_t; the GPU's "recovery_action" (R570+) */
#define FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT 195
#define FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT 196
#define POWER_SCOPE_GPU 0

/* the state path a field reads (an unsigned int), or NULL for a field the simulated GPUs do not report */
static const char *field_path(unsigned int id, unsigned int scope)
{
    switch (id) {
    case FI_DEV_POWER_MIN_LIMIT: return scope == POWER_SCOPE_GPU ? "power.min_mw" : NULL;
    case FI_DEV_POWER_MAX_LIMIT: return scope == POWER_SCOPE_GPU ? "power.max_mw" : NULL;
    case FI_DEV_POWER_DEFAULT_LIMIT: return scope == POWER_SCOPE_GPU ? "power.default_mw" : NULL;
    case FI_DEV_POWER_CURRENT_LIMIT: return scope == POWER_SCOPE_GPU ? "power.enforced_mw" : NULL;
    case FI_DEV_POWER_REQUESTED_LIMIT: return scope == POWER_SCOPE_GPU ? "power.limit_mw" : NULL;
    case FI_DEV_GET_GPU_RECOVERY_ACTION: return "recovery_action"; /* absent: a driver without the field */
    case FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT: return "temperature.shutdown";
    case FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT: return "temperature.slowdown";
    case FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT: return "temperature.mem_max";
    case FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT: return "temperature.gpu_max";
    }
    return NULL;
}

/* NVLink fields per link (scopeId = link index): its state from nvlink.links, its speed in MBps from the NVLink
 * generation (nvlink.version 3: 25 GB/s, 4: 26.562 GB/s, 5: 53.125 GB/s per link and direction, the line rate
 * nvidia-smi nvlink -s prints: GB200 transcript in NVIDIA/k8s-test-infra #371), or the link's entry in
 * "nvlink_slow" (the nvlink-slow fault: a link trained below its generation's speed) */
static nvmlReturn_t nvlink_field(const cJSON *g, unsigned int id, unsigned int link, unsigned int *out)
{
    const cJSON *entry = cJSON_GetArrayItem(sim_jpath(g, "nvlink.links"), (int)link);
    if (!entry)
        return NVML_ERROR_NOT_SUPPORTED;
    if (id == FI_DEV_NVLINK_GET_STATE) {
        *out = (cJSON_IsNumber(entry) && entry->valuedouble != 0) || cJSON_IsTrue(entry) ? 1U : 0U;
        return NVML_SUCCESS;
    }
    if (id >= FI_DEV_NVLINK_ERROR_DL_REPLAY && id <= FI_DEV_NVLINK_ERROR_DL_CRC) {
        /* the counters nvmlDeviceGetNvLinkErrorCounter reads: replay, recovery, CRC flit (absent = 0) */
        static const char *const names[] = {"replay", "recovery", "crc_flit"};
        const cJSON *errors = cJSON_GetArrayItem(sim_jpath(g, "nvlink.errors"), (int)link);
        *out = (unsigned int)sim_jint(errors, names[id - FI_DEV_NVLINK_ERROR_DL_REPLAY], 0);
        return NVML_SUCCESS;
    }
    {
        const cJSON *slow = cJSON_GetArrayItem(sim_jpath(g, "nvlink_slow"), (int)link);
        if (cJSON_IsNumber(slow)) {
            *out = (unsigned int)slow->valuedouble;
            return NVML_SUCCESS;
        }
    }
    switch (sim_jint(g, "nvlink.version", 0)) {
    case 3: *out = 25000U; return NVML_SUCCESS;
    case 4: *out = 26562U; return NVML_SUCCESS;
    case 5: *out = 53125U; return NVML_SUCCESS;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
}

SIM_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    struct timespec now;
    long long usec;
    int i;
    DEV_PROLOGUE(__func__, device, 0);
    if (valuesCount < 0 || (valuesCount > 0 && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    clock_gettime(CLOCK_REALTIME, &now);
    usec = (long long)now.tv_sec * 1000000LL + now.tv_nsec / 1000;
    for (i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        const char *path = field_path(v->fieldId, v->scopeId);
        v->timestamp = usec;
        v->latencyUsec = 0;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        memset(&v->value, 0, sizeof(v->value));
        if (sim_board_field(r.g, v)) /* fields a real transcript shows for the model (nvmlsim_board.c) */
            continue;
        if (v->fieldId == FI_DEV_NVLINK_GET_STATE || v->fieldId == FI_DEV_NVLINK_GET_SPEED ||
            (v->fieldId >= FI_DEV_NVLINK_ERROR_DL_REPLAY && v->fieldId <= FI_DEV_NVLINK_ERROR_DL_CRC)) {
            v->nvmlReturn = nvlink_field(r.g, v->fieldId, v->scopeId, &v->value.uiVal);
            continue;
        }
        if (v->fieldId == FI_DEV_NVLINK_LINK_COUNT) {
            /* the GPU's NVLinks, up or down (nvlink.links); a GPU without NVLink does not support the field */
            int links = cJSON_GetArraySize(sim_jpath(r.g, "nvlink.links"));
            v->value.uiVal = (unsigned int)links;
            v->nvmlReturn = links > 0 ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        v->nvmlReturn = path ? sim_get_u32(r.g, path, &v->value.uiVal) : NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ modes with a fixed answer */

/* data-centre boards drive no display: the mode is reported, and it is off. The real H200 on 580 answers
 * nvmlDeviceGetDisplayMode 1 all the same (getter dump; its nvidia-smi prints "Display Attached: Yes"): a model
 * with a real transcript takes the block's "display_mode" there (`model_key`) */
static nvmlReturn_t display_off(const char *fn, nvmlDevice_t device, nvmlEnableState_t *mode, const char *model_key)
{
    const cJSON *m;
    DEV_PROLOGUE(fn, device, 0);
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    m = model_key ? sim_model_nvml(r.g) : NULL;
    *mode = m ? (nvmlEnableState_t)sim_jint(m, model_key, 0) : 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display)
{
    return display_off(__func__, device, display, "display_mode");
}

SIM_API nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive)
{
    return display_off(__func__, device, isActive, NULL);
}

/* accounting is off unless the state says otherwise (the driver's default after boot) */
SIM_API nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    DEV_PROLOGUE(__func__, device, 0);
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = (unsigned int)sim_jint(r.g, "accounting.mode", 0);
    return NVML_SUCCESS;
}

/* one simulated board carries one GPU */
SIM_API nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool)
{
    DEV_PROLOGUE(__func__, device, 0);
    if (!multiGpuBool)
        return NVML_ERROR_INVALID_ARGUMENT;
    *multiGpuBool = 0;
    return NVML_SUCCESS;
}

/* nvmlDeviceGetPowerState is the deprecated name of the performance state */
SIM_API nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, unsigned int *pState)
{
    DEV_PROLOGUE(__func__, device, 0);
    return sim_get_u32(r.g, "performance_state", pState);
}

/* ------------------------------------------------------------------------------------ processes */

/* graphics processes are the state's processes of type "G" or "C+G"; MPS clients are not simulated */
static nvmlReturn_t no_processes(const char *fn, nvmlDevice_t device, unsigned int *infoCount)
{
    DEV_PROLOGUE(fn, device, SIM_F_MIG_OK);
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_t *infos)
{
    return sim_list_processes(__func__, device, SIM_PROC_GRAPHICS, infoCount, infos, NULL);
}

SIM_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_t *infos)
{
    return sim_list_processes(__func__, device, SIM_PROC_GRAPHICS, infoCount, infos, NULL);
}

SIM_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_processes(__func__, device, infoCount);
}

SIM_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_processes(__func__, device, infoCount);
}

/* ------------------------------------------------------------------------------------- system */

static nvmlReturn_t zero_count(const char *fn, unsigned int *count)
{
    SIM_LOCKED;
    nvmlReturn_t rc = sim_begin(fn);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}

/* no S-class units (those are NVIDIA's own rack enclosures) */
SIM_API nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount)
{
    return zero_count(__func__, unitCount);
}

/* no GPU excluded through NVreg_ExcludedGpus */
SIM_API nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount)
{
    return zero_count(__func__, deviceCount);
}

/* ------------------------------------------------------------------------------ MIG device attributes */

/* A MIG device's share of the GPU: SMs and slices of its compute instance profile, engines and memory of its
 * GPU instance profile. A physical GPU's attributes are not in the state: NOT_SUPPORTED, never a guess. */
SIM_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    const cJSON *gip, *cip;
    DEV_PROLOGUE(__func__, device, SIM_F_MIG_OK);
    if (!attributes)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (r.gi < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    gip = sim_gi_profile_by_id(r.g, (unsigned int)sim_jint(r.gio, "profile_id", -1));
    cip = sim_ci_profile_by_id(sim_ci_table(r.g, gip), (unsigned int)sim_jint(r.cio, "profile_id", -1));
    if (!gip || !cip)
        return NVML_ERROR_UNKNOWN;
    memset(attributes, 0, sizeof(*attributes));
    attributes->multiprocessorCount = (unsigned int)sim_jint(cip, "sms", 0);
    attributes->sharedCopyEngineCount = (unsigned int)sim_jint(gip, "copy_engines", 0);
    attributes->sharedDecoderCount = (unsigned int)sim_jint(gip, "decoders", 0);
    attributes->sharedEncoderCount = (unsigned int)sim_jint(gip, "encoders", 0);
    attributes->sharedJpegCount = (unsigned int)sim_jint(gip, "jpegs", 0);
    attributes->sharedOfaCount = (unsigned int)sim_jint(gip, "ofas", 0);
    attributes->gpuInstanceSliceCount = (unsigned int)sim_jint(gip, "slices", 0);
    attributes->computeInstanceSliceCount = (unsigned int)sim_jint(cip, "slices", 0);
    attributes->memorySizeMB = (unsigned long long)sim_jint(gip, "memory_mib", 0);
    return NVML_SUCCESS;
}

/* The GPU's "virtualization_mode" (nvml.h nvmlGpuVirtualizationMode_t: 0 NONE, bare metal, the default; 1
 * PASSTHROUGH, a GPU passed through to a VM; 2 VGPU; 3 HOST_VGPU; 4 HOST_VSGA). The real H200 passed through to a VM
 * (ground truth h200-sxm-passthrough-r580, driver 580.159.04) answers 1; nvidia-smi prints it "Pass-Through". */
SIM_API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, unsigned int *pVirtualMode)
{
    DEV_PROLOGUE(__func__, device, 0);
    if (!pVirtualMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pVirtualMode = (unsigned int)sim_jint(r.g, "virtualization_mode", 0);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------- BAR1 */

/* BAR1 (the PCIe aperture onto GPU memory) from bar1.total_mib / bar1.used_mib; a MIG device reports its GPU's
 * aperture. A state without a bar1 object has no size to report: NOT_SUPPORTED. */
SIM_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    double total, used = 0;
    DEV_PROLOGUE(__func__, device, SIM_F_MIG_OK);
    if (!bar1Memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jnum(r.g, "bar1.total_mib", &total))
        return NVML_ERROR_NOT_SUPPORTED;
    if (r.gi < 0)
        sim_jnum(r.g, "bar1.used_mib", &used);
    if (used > total)
        used = total;
    bar1Memory->bar1Total = (unsigned long long)total * 1048576ULL;
    bar1Memory->bar1Used = (unsigned long long)used * 1048576ULL;
    bar1Memory->bar1Free = bar1Memory->bar1Total - bar1Memory->bar1Used;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------ clocks, power */

/* NVML_CLOCK_ID_CURRENT is the state's current clock. The application-clock target and default (ids 1, 2) and the
 * customer boost clock (3) answer for a model with a real transcript (nvmlsim_board.c: the maximum clocks; video
 * NOT_SUPPORTED; the H200 on 580 getter dump for ids 0-2, id 3 as nvmlDeviceGetMaxCustomerBoostClock), where a
 * clock type past NVML_CLOCK_COUNT is NOT_SUPPORTED for the current clock and INVALID_ARGUMENT otherwise; other
 * models: NOT_SUPPORTED (not in the state). */
SIM_API nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, unsigned int clockId,
                                        unsigned int *clockMHz)
{
    static const char *const paths[] = {"clocks.current.graphics", "clocks.current.sm", "clocks.current.mem",
                                        "clocks.current.video"};
    static const char *const max_paths[] = {"clocks.max.graphics", "clocks.max.sm", "clocks.max.mem"};
    int board;
    DEV_PROLOGUE(__func__, device, 0);
    board = sim_model_nvml(r.g) != NULL;
    if (board && clockType >= 4 && clockId == 0 && clockMHz)
        return NVML_ERROR_NOT_SUPPORTED;
    if (clockType >= 4 || clockId >= 4 || !clockMHz)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (clockId == 0)
        return sim_get_u32(r.g, paths[clockType], clockMHz);
    if (!board || clockType == 3 || (clockId == 3 && clockType == 2))
        return NVML_ERROR_NOT_SUPPORTED;
    return sim_get_u32(r.g, max_paths[clockType], clockMHz);
}

/* power management (limits, readings) is on wherever the state has a power object */
SIM_API nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    DEV_PROLOGUE(__func__, device, 0);
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jpath(r.g, "power"))
        return NVML_ERROR_NOT_SUPPORTED;
    *mode = 1;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------- setters */

typedef struct nvmlPowerValue_v2_st {
    unsigned int version;
    unsigned char powerScope; /* nvml.h: unsigned char (pynvml: c_uint at the same offset) */
    unsigned int powerValueMw;
} nvmlPowerValue_v2_t;
#define nvmlPowerValue_v2 NVML_STRUCT_VERSION(nvmlPowerValue_v2_t, 2)

SIM_API nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit);

/* the GPU scope is nvmlDeviceSetPowerManagementLimit; module and memory scopes exist on Grace boards only */
SIM_API nvmlReturn_t nvmlDeviceSetPowerManagementLimit_v2(nvmlDevice_t device, nvmlPowerValue_v2_t *powerValue)
{
    if (!powerValue)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (powerValue->version != nvmlPowerValue_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (powerValue->powerScope != POWER_SCOPE_GPU) {
        DEV_PROLOGUE(__func__, device, 0);
        (void)r;
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return nvmlDeviceSetPowerManagementLimit(device, powerValue->powerValueMw);
}

/* ECC mode changes are pending until the next GPU reset or reboot (hardware.py applies them) */
SIM_API nvmlReturn_t nvmlDeviceSetEccMode(nvmlDevice_t device, nvmlEnableState_t ecc)
{
    DEV_PROLOGUE(__func__, device, 0);
    if (ecc > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jpath(r.g, "ecc"))
        return NVML_ERROR_NOT_SUPPORTED;
    rc = sim_write_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_reresolve(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    sim_jset_num(sim_jpath(r.g, "ecc"), "pending", ecc);
    return sim_write_commit();
}
