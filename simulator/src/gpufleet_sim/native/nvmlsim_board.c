/*
 * nvmlsim_board.c - getters a real driver answers for a board that the state does not describe by a field of
 * its own: application and default clocks, per-P-state clock ranges, supported memory clocks, inforom object
 * versions, GSP firmware, bus type, board and module id, power source, energy counter, margin temperature, PCIe
 * speed and throughput, encoder/decoder/JPEG/OFA utilization, confidential-computing state, driver branch ...
 *
 * Every value comes from the model's "nvml" block (models/<model>.json, compiled in by gen_models.py), which
 * names the real transcript it was read from, or is derived from the state as that transcript shows it derived
 * (application clocks = the maximum clocks, margin temperature = max operating minus current, ...). A model
 * without the block answers NOT_SUPPORTED here, as before: nobody has seen those getters on that model.
 * Argument errors come first and are the real driver's (H200, 580.159.04). Values no transcript shows are
 * marked INFERRED.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

#include "nvmlsim.h"
#include "models_nvml.h"

/* --------------------------------------------------------------------------------------- the model block */

static cJSON *g_model_blocks[sizeof(SIM_MODEL_NVML) / sizeof(SIM_MODEL_NVML[0])];

const cJSON *sim_model_nvml(const cJSON *g)
{
    const char *model = sim_jstr(g, "model");
    size_t i;
    if (!model)
        return NULL;
    for (i = 0; SIM_MODEL_NVML[i][0]; i++) {
        if (strcmp(SIM_MODEL_NVML[i][0], model) != 0)
            continue;
        if (!g_model_blocks[i])
            g_model_blocks[i] = cJSON_Parse(SIM_MODEL_NVML[i][1]);
        return g_model_blocks[i];
    }
    return NULL;
}

unsigned long long sim_supported_events(const cJSON *g)
{
    const cJSON *m = sim_model_nvml(g);
    return m ? (unsigned long long)sim_jint(m, "supported_event_types", (long long)SIM_SUPPORTED_EVENTS)
             : SIM_SUPPORTED_EVENTS;
}

/* resolve the handle (whole GPUs only), then the model's block; NOT_SUPPORTED without one */
#define BOARD(fn, device)                                                    \
    SIM_LOCKED;                                                              \
    sim_ref_t r;                                                             \
    const cJSON *m;                                                          \
    nvmlReturn_t rc = sim_dev((fn), (device), 0, &r);                        \
    if (rc != NVML_SUCCESS)                                                  \
        return rc;                                                           \
    m = sim_model_nvml(r.g)
#define NEED_MODEL()                                                         \
    do {                                                                     \
        if (!m)                                                              \
            return NVML_ERROR_NOT_SUPPORTED;                                 \
    } while (0)

static nvmlReturn_t put_u32(unsigned int *out, long long v)
{
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = (unsigned int)v;
    return NVML_SUCCESS;
}

/* a constant of the block (or `def` when the key is absent) */
static nvmlReturn_t block_u32(const char *fn, nvmlDevice_t device, const char *key, long long def, unsigned int *out)
{
    BOARD(fn, device);
    NEED_MODEL();
    return put_u32(out, sim_jint(m, key, def));
}

static unsigned long long now_us(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

static const char *const CLOCK_NAMES[] = {"graphics", "sm", "mem", "video"};

/* ------------------------------------------------------------------------------------------------ clocks */

/* Application clocks (target and default): the maximum clocks for graphics, SM and memory; video NOT_SUPPORTED;
 * a clock type past NVML_CLOCK_COUNT INVALID_ARGUMENT (the H200 dump: 1980, 1980, 3201, NS, IA...). */
static nvmlReturn_t app_clock(const char *fn, nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    char path[48];
    BOARD(fn, device);
    if (type >= 4 || !clock)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    if (type == 3)
        return NVML_ERROR_NOT_SUPPORTED;
    snprintf(path, sizeof(path), "clocks.max.%s", CLOCK_NAMES[type]);
    return sim_get_u32(r.g, path, clock);
}

SIM_API nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                    unsigned int *clockMHz)
{
    return app_clock(__func__, device, clockType, clockMHz);
}

SIM_API nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                           unsigned int *clockMHz)
{
    return app_clock(__func__, device, clockType, clockMHz);
}

/* the customer boost clock: graphics and SM only (the dump: 1980, 1980, NS, NS, IA...) */
SIM_API nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                        unsigned int *clockMHz)
{
    char path[48];
    BOARD(__func__, device);
    if (clockType >= 4 || !clockMHz)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    if (clockType >= 2)
        return NVML_ERROR_NOT_SUPPORTED;
    snprintf(path, sizeof(path), "clocks.max.%s", CLOCK_NAMES[clockType]);
    return sim_get_u32(r.g, path, clockMHz);
}

static int supports_pstate(const cJSON *m, unsigned int pstate)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, sim_jpath(m, "supported_performance_states"))
    {
        if (cJSON_IsNumber(p) && (unsigned int)p->valuedouble == pstate)
            return 1;
    }
    return 0;
}

/* per P-state ranges: graphics/SM/video from the block's minimum to the maximum clock, memory fixed per P-state
 * (the dump: P0 and P2 answer, every other P-state NVML_ERROR_UNKNOWN) */
SIM_API nvmlReturn_t nvmlDeviceGetMinMaxClockOfPState(nvmlDevice_t device, nvmlClockType_t type, unsigned int pstate,
                                                      unsigned int *minClockMHz, unsigned int *maxClockMHz)
{
    char path[48];
    unsigned int max;
    BOARD(__func__, device);
    if (type >= 4 || !minClockMHz || !maxClockMHz)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    if (!supports_pstate(m, pstate))
        return NVML_ERROR_UNKNOWN;
    if (type == 2) {
        snprintf(path, sizeof(path), "pstate_memory_clocks.%u", pstate);
        *minClockMHz = *maxClockMHz = (unsigned int)sim_jint(m, path, 0);
        return NVML_SUCCESS;
    }
    snprintf(path, sizeof(path), "clocks.max.%s", CLOCK_NAMES[type]);
    rc = sim_get_u32(r.g, path, &max);
    if (rc != NVML_SUCCESS)
        return rc;
    snprintf(path, sizeof(path), "min_clocks.%s", CLOCK_NAMES[type]);
    *minClockMHz = (unsigned int)sim_jint(m, path, max);
    *maxClockMHz = max;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count,
                                                        unsigned int *clocksMHz)
{
    const cJSON *list, *c;
    unsigned int n, i = 0;
    BOARD(__func__, device);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    list = sim_jpath(m, "supported_memory_clocks");
    n = (unsigned int)cJSON_GetArraySize(list);
    if (*count < n || !clocksMHz) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    cJSON_ArrayForEach(c, list)
    {
        clocksMHz[i++] = (unsigned int)c->valuedouble;
    }
    *count = n;
    return NVML_SUCCESS;
}

#define NVML_PSTATE_UNKNOWN 32U

SIM_API nvmlReturn_t nvmlDeviceGetSupportedPerformanceStates(nvmlDevice_t device, unsigned int *pstates,
                                                             unsigned int size)
{
    const cJSON *list, *c;
    unsigned int n, i = 0;
    BOARD(__func__, device);
    if (!pstates)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    list = sim_jpath(m, "supported_performance_states");
    n = (unsigned int)cJSON_GetArraySize(list);
    if (size < n * sizeof(unsigned int))
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (i = 0; i < size / sizeof(unsigned int); i++)
        pstates[i] = NVML_PSTATE_UNKNOWN;
    i = 0;
    cJSON_ArrayForEach(c, list)
    {
        pstates[i++] = (unsigned int)c->valuedouble;
    }
    return NVML_SUCCESS;
}

#define NVML_PERF_MODES_BUFFER_SIZE 2048
typedef struct {
    unsigned int version;
    char str[NVML_PERF_MODES_BUFFER_SIZE];
} sim_perf_modes_t;
#define SIM_PERF_MODES_V1 NVML_STRUCT_VERSION(sim_perf_modes_t, 1)

static int clock_text(char *buf, size_t len, unsigned int gr, unsigned int grmin, unsigned int grmax,
                      unsigned int mem, unsigned int rate)
{
    return snprintf(buf, len,
                    "nvclock=%u, nvclockmin=%u, nvclockmax=%u, nvclockeditable=0, memclock=%u, memclockmin=%u, "
                    "memclockmax=%u, memclockeditable=0, memTransferRate=%u, memTransferRatemin=%u, "
                    "memTransferRatemax=%u, memTransferRateeditable=0",
                    gr, grmin, grmax, mem, mem, mem, rate * mem, rate * mem, rate * mem);
}

/* the dump: "nvclock=345, nvclockmin=345, nvclockmax=1980, nvclockeditable=0, memclock=3201, ..." */
SIM_API nvmlReturn_t nvmlDeviceGetCurrentClockFreqs(nvmlDevice_t device, sim_perf_modes_t *freqs)
{
    BOARD(__func__, device);
    if (!freqs)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (freqs->version != SIM_PERF_MODES_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    NEED_MODEL();
    clock_text(freqs->str, sizeof(freqs->str), (unsigned int)sim_jint(r.g, "clocks.current.graphics", 0),
               (unsigned int)sim_jint(m, "min_clocks.graphics", 0), (unsigned int)sim_jint(r.g, "clocks.max.graphics", 0),
               (unsigned int)sim_jint(r.g, "clocks.current.mem", 0),
               (unsigned int)sim_jint(m, "memory_transfer_rate_per_clock", 2));
    return NVML_SUCCESS;
}

/* one "perf=N, ..." entry per supported memory clock, slowest first, joined by " ; " (the dump's two levels) */
SIM_API nvmlReturn_t nvmlDeviceGetPerformanceModes(nvmlDevice_t device, sim_perf_modes_t *perfModes)
{
    const cJSON *list;
    int n, i, perf = 0;
    size_t used = 0;
    BOARD(__func__, device);
    if (!perfModes)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (perfModes->version != SIM_PERF_MODES_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    NEED_MODEL();
    list = sim_jpath(m, "supported_memory_clocks");
    n = cJSON_GetArraySize(list);
    perfModes->str[0] = '\0';
    for (i = n - 1; i >= 0 && used < sizeof(perfModes->str); i--, perf++) {
        used += (size_t)snprintf(perfModes->str + used, sizeof(perfModes->str) - used, "%sperf=%d, ",
                                 perf ? " ; " : "", perf);
        if (used >= sizeof(perfModes->str))
            break;
        used += (size_t)clock_text(perfModes->str + used, sizeof(perfModes->str) - used,
                                   (unsigned int)sim_jint(r.g, "clocks.current.graphics", 0),
                                   (unsigned int)sim_jint(m, "min_clocks.graphics", 0),
                                   (unsigned int)sim_jint(r.g, "clocks.max.graphics", 0),
                                   (unsigned int)cJSON_GetArrayItem(list, i)->valuedouble,
                                   (unsigned int)sim_jint(m, "memory_transfer_rate_per_clock", 2));
    }
    return NVML_SUCCESS;
}

/* The VF offsets: none set (the dump: 0 and [0, 0]) */
SIM_API nvmlReturn_t nvmlDeviceGetGpcClkVfOffset(nvmlDevice_t device, int *offset)
{
    BOARD(__func__, device);
    if (!offset)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *offset = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemClkVfOffset(nvmlDevice_t device, int *offset)
{
    BOARD(__func__, device);
    if (!offset)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *offset = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpcClkMinMaxVfOffset(nvmlDevice_t device, int *minOffset, int *maxOffset)
{
    BOARD(__func__, device);
    if (!minOffset || !maxOffset)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *minOffset = *maxOffset = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemClkMinMaxVfOffset(nvmlDevice_t device, int *minOffset, int *maxOffset)
{
    BOARD(__func__, device);
    if (!minOffset || !maxOffset)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *minOffset = *maxOffset = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetAdaptiveClockInfoStatus(nvmlDevice_t device, unsigned int *status)
{
    return block_u32(__func__, device, "adaptive_clock_status", 0, status);
}

/* ---------------------------------------------------------------------------------- identity and firmware */

#define NVML_INFOROM_COUNT 4U

/* object 0 OEM, 1 ECC, 2 power (the H200: NOT_SUPPORTED), 3 DEN (NOT_SUPPORTED): the block's list by object */
SIM_API nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, unsigned int object, char *version,
                                                 unsigned int length)
{
    const cJSON *v;
    BOARD(__func__, device);
    if (object >= NVML_INFOROM_COUNT || !version)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    v = cJSON_GetArrayItem(sim_jpath(m, "inforom_versions"), (int)object);
    if (!cJSON_IsString(v))
        return NVML_ERROR_NOT_SUPPORTED;
    return sim_copy_str(v->valuestring, version, length);
}

SIM_API nvmlReturn_t nvmlDeviceGetInforomConfigurationChecksum(nvmlDevice_t device, unsigned int *checksum)
{
    return block_u32(__func__, device, "inforom_configuration_checksum", 0, checksum);
}

/* GSP firmware runs and is the driver's own build (the dump: "580.159.04", mode [1, 1]) */
SIM_API nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *version)
{
    BOARD(__func__, device);
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    snprintf(version, 64, "%s", SIM_DRIVER_VERSION); /* NVML_GSP_FIRMWARE_VERSION_BUF_SIZE */
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t device, unsigned int *isEnabled,
                                                  unsigned int *defaultMode)
{
    BOARD(__func__, device);
    if (!isEnabled || !defaultMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *isEnabled = (unsigned int)cJSON_GetNumberValue(cJSON_GetArrayItem(sim_jpath(m, "gsp_firmware_mode"), 0));
    *defaultMode = (unsigned int)cJSON_GetNumberValue(cJSON_GetArrayItem(sim_jpath(m, "gsp_firmware_mode"), 1));
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetBusType(nvmlDevice_t device, unsigned int *type)
{
    return block_u32(__func__, device, "bus_type", 2, type);
}

SIM_API nvmlReturn_t nvmlDeviceGetPowerSource(nvmlDevice_t device, unsigned int *powerSource)
{
    return block_u32(__func__, device, "power_source", 0, powerSource);
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
    return block_u32(__func__, device, "memory_bus_width", 0, busWidth);
}

SIM_API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
    return block_u32(__func__, device, "num_gpu_cores", 0, numCores);
}

/* Board id: the real H200 at 00:06.0 answers 0x6, public transcripts 0x1800 at 18:00.0: (bus << 8) | device.
 * INFERRED rule from those; differs per machine. */
SIM_API nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int *boardId)
{
    BOARD(__func__, device);
    if (!boardId)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *boardId = (unsigned int)((sim_jint(r.g, "pci.bus", 0) << 8) | sim_jint(r.g, "pci.device", 0));
    return NVML_SUCCESS;
}

/* Module id: the board's slot (the real one-GPU VM: 8). INFERRED: index + 1, differs per machine. */
SIM_API nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t device, unsigned int *moduleId)
{
    BOARD(__func__, device);
    NEED_MODEL();
    return put_u32(moduleId, sim_jint(r.g, "index", 0) + 1);
}

/* IRQ: assigned by the host's kernel (the real VM: 41). INFERRED: 40 + index + 1, differs per machine. */
SIM_API nvmlReturn_t nvmlDeviceGetIrqNum(nvmlDevice_t device, unsigned int *irqNum)
{
    BOARD(__func__, device);
    NEED_MODEL();
    return put_u32(irqNum, 41 + sim_jint(r.g, "index", 0));
}

typedef struct {
    unsigned int version;
    unsigned long long value;
} sim_pdi_t;

/* Per-device identifier (the real one: 0xc147ed1eec97bfc7). INFERRED: the UUID's first 16 hex digits, so it
 * differs per GPU and stays the same across calls. pynvml passes no version. */
SIM_API nvmlReturn_t nvmlDeviceGetPdi(nvmlDevice_t device, sim_pdi_t *pdi)
{
    const char *uuid;
    char hex[17] = {0};
    size_t i, n = 0;
    BOARD(__func__, device);
    if (!pdi)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    uuid = sim_jstr(r.g, "uuid");
    for (i = 4; uuid && uuid[i] && n < 16; i++) {
        if (uuid[i] != '-')
            hex[n++] = uuid[i];
    }
    pdi->value = strtoull(hex, NULL, 16);
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char chassisSerialNumber[16];
    unsigned char slotNumber;
    unsigned char trayIndex;
    unsigned char hostId;
    unsigned char peerType;
    unsigned char moduleId;
} sim_platform_info_v2_t;
#define SIM_PLATFORM_INFO_V2 NVML_STRUCT_VERSION(sim_platform_info_v2_t, 2)

/* The dump (a VM without a chassis): empty GUID and serial, slot 0, tray 0, host id 1, peer type 0, module 8.
 * Machine-specific; here module id as nvmlDeviceGetModuleId, the rest as the dump. */
SIM_API nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, sim_platform_info_v2_t *info)
{
    BOARD(__func__, device);
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != SIM_PLATFORM_INFO_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    NEED_MODEL();
    memset((char *)info + sizeof(info->version), 0, sizeof(*info) - sizeof(info->version));
    info->hostId = 1;
    info->moduleId = (unsigned char)(sim_jint(r.g, "index", 0) + 1);
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int version;
    unsigned int value;
} sim_addressing_mode_t;

SIM_API nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, sim_addressing_mode_t *mode)
{
    BOARD(__func__, device);
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    mode->value = (unsigned int)sim_jint(m, "addressing_mode", 0);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, unsigned int *c2cModeInfo)
{
    return block_u32(__func__, device, "c2c_enabled", 0, c2cModeInfo);
}

/* API restrictions: application clocks (0) NOT_SUPPORTED, auto boost (1) unrestricted (the dump) */
SIM_API nvmlReturn_t nvmlDeviceGetAPIRestriction(nvmlDevice_t device, unsigned int apiType, unsigned int *isRestricted)
{
    BOARD(__func__, device);
    if (apiType >= 2 || !isRestricted)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    if (apiType == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *isRestricted = (unsigned int)sim_jint(m, "api_restriction_auto_boost", 0);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------- PCIe */

/* per-lane speed of a generation in MB/s, and nvmlPcieLinkMaxSpeed_t (1 = 2500 ... 6 = 64000) */
static const unsigned int PCIE_MBPS[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};

SIM_API nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t device, unsigned int *pcieSpeed)
{
    long long gen;
    BOARD(__func__, device);
    if (!pcieSpeed)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    gen = sim_jint(r.g, "pcie.gen", 0);
    if (gen < 1 || gen > 6)
        return NVML_ERROR_NOT_SUPPORTED;
    *pcieSpeed = PCIE_MBPS[gen];
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t device, unsigned int *maxSpeed)
{
    long long gen;
    BOARD(__func__, device);
    if (!maxSpeed)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    gen = sim_jint(r.g, "pcie.max_gen", 0);
    if (gen < 1 || gen > 6)
        return NVML_ERROR_NOT_SUPPORTED;
    *maxSpeed = (unsigned int)gen;
    return NVML_SUCCESS;
}

/* TX (0) and RX (1) KB/s. The state has no traffic: 0. INFERRED (the idle real one moved ~700 KB/s). */
SIM_API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, unsigned int counter, unsigned int *value)
{
    BOARD(__func__, device);
    if (counter >= 2 || !value)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *value = 0;
    return NVML_SUCCESS;
}

/* -------------------------------------------------------------------------------------- power, thermal */

/* mJ since boot at the current draw: grows at exactly the power the GPU reports, so readers that difference two
 * readings see that power. INFERRED (a consistent value; the real counter starts when the driver loads). */
SIM_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    BOARD(__func__, device);
    if (!energy)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *energy = (unsigned long long)sim_jint(r.g, "power.usage_mw", 0) * now_us(CLOCK_BOOTTIME) / 1000000ULL;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int version;
    int marginTemperature;
} sim_margin_t;
#define SIM_MARGIN_V1 NVML_STRUCT_VERSION(sim_margin_t, 1)

/* T.Limit: the max operating temperature minus the current one (the dump: 87 - 33 = 54; qd_TEMPERATURE.txt) */
SIM_API nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, sim_margin_t *margin)
{
    BOARD(__func__, device);
    if (!margin)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (margin->version != SIM_MARGIN_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    NEED_MODEL();
    margin->marginTemperature = (int)(sim_jint(r.g, "temperature.gpu_max", 0) - sim_jint(r.g, "temperature.gpu", 0));
    return NVML_SUCCESS;
}

typedef struct {
    int controller;
    int defaultMinTemp;
    int defaultMaxTemp;
    int currentTemp;
    int target;
} sim_thermal_sensor_t;
typedef struct {
    unsigned int count;
    sim_thermal_sensor_t sensor[3];
} sim_thermal_settings_t;

/* The dump (indices 0..2): sensor 0 = GPU internal controller, target GPU, 0..127 C, the current temperature;
 * sensors 1 and 2 = controller 1, target 1, no range or reading. Each call fills the entry of its index. */
SIM_API nvmlReturn_t nvmlDeviceGetThermalSettings(nvmlDevice_t device, unsigned int sensorIndex,
                                                  sim_thermal_settings_t *settings)
{
    sim_thermal_sensor_t *s;
    BOARD(__func__, device);
    if (!settings || sensorIndex >= 3)
        return NVML_ERROR_INVALID_ARGUMENT; /* INFERRED: the dump stops at index 2 */
    NEED_MODEL();
    s = &settings->sensor[sensorIndex];
    s->controller = 1;
    s->target = 1;
    s->defaultMinTemp = 0;
    s->defaultMaxTemp = sensorIndex == 0 ? (int)sim_jint(m, "thermal_sensor_max", 127) : 0;
    s->currentTemp = sensorIndex == 0 ? (int)sim_jint(r.g, "temperature.gpu", 0) : 0;
    settings->count = sensorIndex + 1; /* INFERRED: pynvml does not show it */
    return NVML_SUCCESS;
}

typedef struct {
    unsigned long long referenceTime;
    unsigned long long violationTime;
} sim_violation_t;

/* perf policies 0..5 answer (the dump); no simulated violation: 0 ns, reference time now */
SIM_API nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, unsigned int perfPolicyType,
                                                  sim_violation_t *violTime)
{
    BOARD(__func__, device);
    if (perfPolicyType >= 6 || !violTime)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    violTime->referenceTime = now_us(CLOCK_REALTIME);
    violTime->violationTime = 0;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int bIsPresent;
    unsigned int percentage;
    unsigned int incThreshold;
    unsigned int decThreshold;
} sim_pstate_util_t;
typedef struct {
    unsigned int flags;
    sim_pstate_util_t utilization[8];
} sim_dynamic_pstates_t;

/* four utilization domains present (graphics, frame buffer, video, bus: the dump), at the state's utilization */
SIM_API nvmlReturn_t nvmlDeviceGetDynamicPstatesInfo(nvmlDevice_t device, sim_dynamic_pstates_t *info)
{
    int i, present;
    BOARD(__func__, device);
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    present = (int)sim_jint(m, "dynamic_pstates_domains", 4);
    memset(info, 0, sizeof(*info));
    for (i = 0; i < 8; i++)
        info->utilization[i].bIsPresent = i < present;
    info->utilization[0].percentage = (unsigned int)sim_jint(r.g, "utilization.gpu", 0);
    info->utilization[1].percentage = (unsigned int)sim_jint(r.g, "utilization.memory", 0);
    return NVML_SUCCESS;
}

typedef struct {
    unsigned long long timeStamp;
    unsigned long long value; /* nvmlValue_t: the unsigned int member for every type served here */
} sim_sample_t;

/* Samples since lastSeenTimeStamp: one sample now, of the state's reading (power in mW, GPU and memory
 * utilization; 0 for the media engines). The dump: types 0-4, 8, 9 answer (value type unsigned int), the clock
 * samples 5 and 6 NOT_FOUND, module power 7 INVALID_ARGUMENT. One sample a call is INFERRED (the driver keeps a
 * buffer of them). */
SIM_API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, unsigned int type, unsigned long long lastSeenTimeStamp,
                                          unsigned int *sampleValType, unsigned int *sampleCount,
                                          sim_sample_t *samples)
{
    unsigned long long value = 0;
    (void)lastSeenTimeStamp;
    BOARD(__func__, device);
    if (type >= 10 || type == 7 || !sampleValType || !sampleCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    if (type == 5 || type == 6)
        return NVML_ERROR_NOT_FOUND;
    if (type == 0)
        value = (unsigned long long)sim_jint(r.g, "power.usage_mw", 0);
    else if (type == 1)
        value = (unsigned long long)sim_jint(r.g, "utilization.gpu", 0);
    else if (type == 2)
        value = (unsigned long long)sim_jint(r.g, "utilization.memory", 0);
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (!samples) {
        *sampleCount = 1;
        return NVML_SUCCESS;
    }
    if (*sampleCount < 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    samples[0].timeStamp = now_us(CLOCK_REALTIME);
    samples[0].value = value;
    *sampleCount = 1;
    return NVML_SUCCESS;
}

/* --------------------------------------------------------------------------------- engines, sessions */

/* Encoder, decoder, JPEG and OFA utilization: no media work is simulated, 0 % over the dump's 100000 us period */
static nvmlReturn_t engine_util(const char *fn, nvmlDevice_t device, unsigned int *utilization,
                                unsigned int *samplingPeriodUs)
{
    BOARD(fn, device);
    if (!utilization || !samplingPeriodUs)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *utilization = 0;
    *samplingPeriodUs = (unsigned int)sim_jint(m, "utilization_sampling_us", 100000);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *u, unsigned int *p)
{
    return engine_util(__func__, device, u, p);
}

SIM_API nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *u, unsigned int *p)
{
    return engine_util(__func__, device, u, p);
}

SIM_API nvmlReturn_t nvmlDeviceGetJpgUtilization(nvmlDevice_t device, unsigned int *u, unsigned int *p)
{
    return engine_util(__func__, device, u, p);
}

SIM_API nvmlReturn_t nvmlDeviceGetOfaUtilization(nvmlDevice_t device, unsigned int *u, unsigned int *p)
{
    return engine_util(__func__, device, u, p);
}

/* H.264 (0) and HEVC (1) capacity 100 %, AV1 (2) NOT_SUPPORTED (the dump) */
SIM_API nvmlReturn_t nvmlDeviceGetEncoderCapacity(nvmlDevice_t device, unsigned int encoderQueryType,
                                                  unsigned int *encoderCapacity)
{
    const cJSON *v;
    BOARD(__func__, device);
    if (!encoderCapacity || encoderQueryType > 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    v = cJSON_GetArrayItem(sim_jpath(m, "encoder_capacity"), (int)encoderQueryType);
    if (!cJSON_IsNumber(v))
        return NVML_ERROR_NOT_SUPPORTED;
    *encoderCapacity = (unsigned int)v->valuedouble;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount,
                                               unsigned int *averageFps, unsigned int *averageLatency)
{
    BOARD(__func__, device);
    if (!sessionCount || !averageFps || !averageLatency)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *sessionCount = *averageFps = *averageLatency = 0;
    return NVML_SUCCESS;
}

/* no sessions: a count of 0 whatever buffer is passed */
static nvmlReturn_t no_sessions(const char *fn, nvmlDevice_t device, unsigned int *count)
{
    BOARD(fn, device);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    *count = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetEncoderSessions(nvmlDevice_t device, unsigned int *sessionCount, void *sessionInfos)
{
    (void)sessionInfos;
    return no_sessions(__func__, device, sessionCount);
}

SIM_API nvmlReturn_t nvmlDeviceGetFBCSessions(nvmlDevice_t device, unsigned int *sessionCount, void *sessionInfo)
{
    (void)sessionInfo;
    return no_sessions(__func__, device, sessionCount);
}

SIM_API nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count, unsigned int *pids)
{
    (void)pids;
    return no_sessions(__func__, device, count);
}

SIM_API nvmlReturn_t nvmlDeviceGetFBCStats(nvmlDevice_t device, unsigned int *fbcStats)
{
    BOARD(__func__, device);
    if (!fbcStats)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    fbcStats[0] = fbcStats[1] = fbcStats[2] = 0; /* sessionsCount, averageFPS, averageLatency */
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int *bufferSize)
{
    return block_u32(__func__, device, "accounting_buffer_size", 0, bufferSize);
}

/* No process has run since the last sample (the dump: NOT_FOUND for both) */
SIM_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, void *utilization,
                                                     unsigned int *processSamplesCount,
                                                     unsigned long long lastSeenTimeStamp)
{
    (void)utilization;
    (void)lastSeenTimeStamp;
    BOARD(__func__, device);
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    return NVML_ERROR_NOT_FOUND;
}

SIM_API nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device, void *procesesUtilInfo)
{
    BOARD(__func__, device);
    if (!procesesUtilInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    return NVML_ERROR_NOT_FOUND;
}

/* ------------------------------------------------------------------------------------ ECC, repair */

SIM_API nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, unsigned int *defaultMode)
{
    BOARD(__func__, device);
    NEED_MODEL();
    return put_u32(defaultMode, 1); /* ECC on by default on data-centre boards (the dump: 1) */
}

typedef struct {
    unsigned long long l1Cache;
    unsigned long long l2Cache;
    unsigned long long deviceMemory;
    unsigned long long registerFile;
} sim_ecc_counts_t;

/* (corrected 0 / uncorrected 1) x (volatile 0 / aggregate 1): device memory is the state's DRAM count; the
 * state keeps no per-unit SRAM split, so L1, L2 and the register file read 0. INFERRED split. */
SIM_API nvmlReturn_t nvmlDeviceGetDetailedEccErrors(nvmlDevice_t device, unsigned int errorType,
                                                    unsigned int counterType, sim_ecc_counts_t *eccCounts)
{
    char path[64];
    BOARD(__func__, device);
    if (errorType >= 2 || counterType >= 2 || !eccCounts)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    snprintf(path, sizeof(path), "ecc.%s.%s.dram", counterType ? "aggregate" : "volatile",
             errorType ? "uncorrected" : "corrected");
    memset(eccCounts, 0, sizeof(*eccCounts));
    eccCounts->deviceMemory = (unsigned long long)sim_jint(r.g, path, 0);
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int version;
    unsigned int bChannelRepairPending;
    unsigned int bTpcRepairPending;
} sim_repair_status_t;

SIM_API nvmlReturn_t nvmlDeviceGetRepairStatus(nvmlDevice_t device, sim_repair_status_t *repairStatus)
{
    BOARD(__func__, device);
    if (!repairStatus)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    repairStatus->bChannelRepairPending = repairStatus->bTpcRepairPending = 0;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int version;
    unsigned int unrepairableMemory;
} sim_unrepairable_t;

/* a row-remapping failure is the one unrepairable condition the state records */
SIM_API nvmlReturn_t nvmlDeviceGetUnrepairableMemoryFlag_v1(nvmlDevice_t device, sim_unrepairable_t *flag)
{
    BOARD(__func__, device);
    if (!flag)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    flag->unrepairableMemory = sim_jint(r.g, "remapped_rows.failure", 0) ? 1U : 0U;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------- fans */

/* passively cooled: no fan, so any fan index is out of range (the dump: INVALID_ARGUMENT) */
static nvmlReturn_t no_fan(const char *fn, nvmlDevice_t device)
{
    BOARD(fn, device);
    NEED_MODEL();
    return NVML_ERROR_INVALID_ARGUMENT;
}

SIM_API nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    BOARD(__func__, device);
    NEED_MODEL();
    return put_u32(numFans, 0);
}

SIM_API nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device)
{
    return no_fan(__func__, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetTargetFanSpeed(nvmlDevice_t device)
{
    return no_fan(__func__, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetFanControlPolicy_v2(nvmlDevice_t device)
{
    return no_fan(__func__, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetMinMaxFanSpeed(nvmlDevice_t device)
{
    return no_fan(__func__, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetFanSpeedRPM(nvmlDevice_t device)
{
    return no_fan(__func__, device);
}

/* ------------------------------------------------------------------------------------ BBX, CC, vGPU */

SIM_API nvmlReturn_t nvmlDeviceGetLastBBXFlushTime(nvmlDevice_t device, unsigned long long *timestamp,
                                                   unsigned long *durationUs)
{
    BOARD(__func__, device);
    if (!timestamp || !durationUs)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    return NVML_ERROR_NOT_READY; /* no flush since the driver loaded (the dump) */
}

/* confidential computing off: the certificate cannot be read (the dump: NVML_ERROR_UNKNOWN) */
SIM_API nvmlReturn_t nvmlDeviceGetConfComputeGpuCertificate(nvmlDevice_t device, void *gpuCert)
{
    BOARD(__func__, device);
    if (!gpuCert)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    return NVML_ERROR_UNKNOWN;
}

/* CC off: no protected memory; the unprotected size is the memory the driver does not reserve. INFERRED (the
 * real one read 615 MiB less than the total, the state reserves its own figure). */
SIM_API nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device, unsigned long long *memInfo)
{
    BOARD(__func__, device);
    if (!memInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    memInfo[0] = 0;
    memInfo[1] = (unsigned long long)(sim_jint(r.g, "memory.total_mib", 0) - sim_jint(r.g, "memory.reserved_mib", 0))
                 * 1024ULL;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetConfComputeProtectedMemoryUsage(nvmlDevice_t device, unsigned long long *memory)
{
    BOARD(__func__, device);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    memory[0] = memory[1] = memory[2] = 0; /* total, free, used */
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(nvmlDevice_t device, unsigned int *features)
{
    BOARD(__func__, device);
    if (!features)
        return NVML_ERROR_INVALID_ARGUMENT;
    NEED_MODEL();
    features[0] = features[1] = 0; /* isGridLicenseSupported, licensableFeaturesCount (the dump) */
    return NVML_SUCCESS;
}

/* --------------------------------------------------------------------------------------- system level */

/* system-level answers follow the first GPU's model (a host carries one model) */
static nvmlReturn_t system_model(const char *fn, const cJSON **m)
{
    nvmlReturn_t rc = sim_begin(fn);
    if (rc != NVML_SUCCESS)
        return rc;
    *m = sim_gpu_count() > 0 ? sim_model_nvml(sim_gpu_json(0)) : NULL;
    return *m ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

SIM_API nvmlReturn_t nvmlSystemGetConfComputeCapabilities(unsigned int *caps)
{
    SIM_LOCKED;
    const cJSON *m;
    nvmlReturn_t rc = system_model(__func__, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!caps)
        return NVML_ERROR_INVALID_ARGUMENT;
    caps[0] = (unsigned int)sim_jint(m, "conf_compute.cpu_caps", 0);
    caps[1] = (unsigned int)sim_jint(m, "conf_compute.gpus_caps", 0);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlSystemGetConfComputeState(unsigned int *state)
{
    SIM_LOCKED;
    const cJSON *m;
    nvmlReturn_t rc = system_model(__func__, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!state)
        return NVML_ERROR_INVALID_ARGUMENT;
    state[0] = state[1] = state[2] = 0; /* environment, ccFeature, devToolsMode: CC off */
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlSystemGetConfComputeGpusReadyState(unsigned int *isAcceptingWork)
{
    SIM_LOCKED;
    const cJSON *m;
    nvmlReturn_t rc = system_model(__func__, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    return put_u32(isAcceptingWork, 0);
}

typedef struct {
    unsigned int version;
    unsigned long long attackerAdvantage;
} sim_key_rotation_t;

SIM_API nvmlReturn_t nvmlSystemGetConfComputeKeyRotationThresholdInfo(sim_key_rotation_t *info)
{
    SIM_LOCKED;
    const cJSON *m;
    nvmlReturn_t rc = system_model(__func__, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    info->attackerAdvantage = (unsigned long long)sim_jint(m, "conf_compute.attacker_advantage", 0);
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int version;
    char branch[80];
} sim_driver_branch_t;

/* The branch the release was built from: 580.159.04 says "r582_49" (the dump). Other releases: INFERRED
 * "r<major>_00" (no transcript). */
SIM_API nvmlReturn_t nvmlSystemGetDriverBranch(sim_driver_branch_t *branchInfo, unsigned int length)
{
    SIM_LOCKED;
    const cJSON *m;
    nvmlReturn_t rc = system_model(__func__, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!branchInfo || length < 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strcmp(SIM_DRIVER_VERSION, "580.159.04") == 0)
        snprintf(branchInfo->branch, sizeof(branchInfo->branch), "r582_49");
    else
        snprintf(branchInfo->branch, sizeof(branchInfo->branch), "r%d_00", atoi(SIM_DRIVER_VERSION));
    return NVML_SUCCESS;
}

/* no host interface card (the dump: an empty list) */
SIM_API nvmlReturn_t nvmlSystemGetHicVersion(unsigned int *hwbcCount, void *hwbcEntries)
{
    SIM_LOCKED;
    const cJSON *m;
    nvmlReturn_t rc = system_model(__func__, &m);
    (void)hwbcEntries;
    if (rc != NVML_SUCCESS)
        return rc;
    return put_u32(hwbcCount, 0);
}

/* ------------------------------------------------------------------------------------------ field values */

static void field_u32(nvmlFieldValue_t *v, long long value)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = (unsigned int)value;
    v->nvmlReturn = NVML_SUCCESS;
}

static void field_u64(nvmlFieldValue_t *v, long long value)
{
    v->valueType = 3; /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
    v->value.ullVal = (unsigned long long)value;
    v->nvmlReturn = NVML_SUCCESS;
}

static long long ecc_total(const cJSON *g, const char *counter, const char *kind)
{
    char path[64];
    long long total;
    snprintf(path, sizeof(path), "ecc.%s.%s.dram", counter, kind);
    total = sim_jint(g, path, 0);
    snprintf(path, sizeof(path), "ecc.%s.%s.sram", counter, kind);
    return total + sim_jint(g, path, 0);
}

/* The fields the real H200 on 580 answers that the state can fill (nvmlDeviceGetFieldValues in the getter dump,
 * ids 1..279, with their value types). Returns 1 when the field is served here; 0 leaves it to
 * nvmlDeviceGetFieldValues' own table. Models without a block serve none here. */
int sim_board_field(const cJSON *g, nvmlFieldValue_t *v)
{
    unsigned int id = v->fieldId;
    if (!sim_model_nvml(g))
        return 0;
    switch (id) {
    case 1: field_u64(v, sim_jint(g, "ecc.current", 0)); return 1;  /* ECC_CURRENT */
    case 2: field_u64(v, sim_jint(g, "ecc.pending", 0)); return 1;  /* ECC_PENDING */
    case 3: field_u64(v, ecc_total(g, "volatile", "corrected")); return 1;
    case 4: field_u64(v, ecc_total(g, "volatile", "uncorrected")); return 1;
    case 5: field_u64(v, ecc_total(g, "aggregate", "corrected")); return 1;
    case 6: field_u64(v, ecc_total(g, "aggregate", "uncorrected")); return 1;
    case 83:                                                                /* TOTAL_ENERGY_CONSUMPTION */
    case 191:                                                               /* ENERGY */
        field_u64(v, sim_jint(g, "power.usage_mw", 0) * (long long)(now_us(CLOCK_BOOTTIME) / 1000000ULL));
        return 1;
    case 94: field_u32(v, sim_jint(g, "pcie.replay_counter", 0)); return 1; /* PCIE_REPLAY_COUNTER */
    case 142: field_u64(v, sim_jint(g, "remapped_rows.corrected", 0)); return 1;
    case 143: field_u64(v, sim_jint(g, "remapped_rows.uncorrected", 0)); return 1;
    case 144: field_u64(v, sim_jint(g, "remapped_rows.pending", 0)); return 1;
    case 145: field_u64(v, sim_jint(g, "remapped_rows.failure", 0)); return 1;
    case 184: field_u32(v, sim_jbool(g, "mig.reset_required_for_mode", 1) ? 0 : 1); return 1; /* RESETLESS_MIG */
    case 185: /* POWER_AVERAGE, POWER_INSTANT: the GPU scope; no module power on this board (q.txt: N/A) */
    case 186:
        if (v->scopeId != 0)
            return 0;
        field_u32(v, sim_jint(g, "power.usage_mw", 0));
        return 1;
    case 199: field_u32(v, 1); return 1; /* MIG_MODE_INDEPENDENT_MIG_QUERY: profiles answer with MIG off */
    case 230: /* GET_GPU_RECOVERY_ACTION (R570+): the state's, else none (the real one: 0) */
        if (atoi(SIM_DRIVER_VERSION) < 570)
            return 0;
        field_u32(v, sim_jint(g, "recovery_action", 0));
        return 1;
    case 269: field_u64(v, 0); return 1; /* CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: ns, none */
    case 274: v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; return 1; /* EDPP_MULTIPLIER */
    }
    if (id >= 74 && id <= 81) { /* clock event / perf policy time counters (ns): INFERRED none accumulated */
        field_u64(v, 0);
        return 1;
    }
    /* PCIe counters (L0 to recovery, correctable ... lane errors, TX/RX bytes), replay rollovers, reset and drain
     * status, atomics masks: INFERRED 0, the state counts no PCIe traffic or error */
    if (id == 95 || id == 169 || (id >= 173 && id <= 183) || id == 197 || id == 198 || (id >= 226 && id <= 229)) {
        field_u32(v, 0);
        return 1;
    }
    /* power smoothing, power-brake and sync-balancing fields: the real driver answers success and leaves the value
     * untouched (value type 0, 0.0 in the dump) */
    if ((id >= 251 && id <= 268) || (id >= 270 && id <= 279)) {
        v->valueType = 0;
        v->value.dVal = 0.0;
        v->nvmlReturn = NVML_SUCCESS;
        return 1;
    }
    return 0;
}

/* the NVLink bandwidth mode: full (0), also on a host whose GPUs expose no NVLink (the dump) */
SIM_API nvmlReturn_t nvmlSystemGetNvlinkBwMode(unsigned int *nvlinkBwMode)
{
    SIM_LOCKED;
    const cJSON *m;
    nvmlReturn_t rc = system_model(__func__, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    return put_u32(nvlinkBwMode, 0);
}
