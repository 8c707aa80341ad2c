/*
 * nvmlsim_health.c - health getters: ECC, retired pages, remapped rows, temperature, power, clocks and
 * clock event reasons, PCIe and NVLink.
 */
#include <string.h>

#include "nvmlsim.h"

#define DEV_PROLOGUE(fn, device)                              \
    SIM_LOCKED;                                               \
    sim_ref_t r;                                              \
    nvmlReturn_t rc = sim_dev((fn), (device), 0, &r);         \
    if (rc != NVML_SUCCESS)                                   \
        return rc

static nvmlReturn_t get_u32(const char *fn, nvmlDevice_t device, const char *path, unsigned int *out)
{
    DEV_PROLOGUE(fn, device);
    return sim_get_u32(r.g, path, out);
}

static nvmlReturn_t get_u64(const char *fn, nvmlDevice_t device, const char *path, unsigned long long *out)
{
    double v;
    DEV_PROLOGUE(fn, device);
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jnum(r.g, path, &v))
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned long long)v;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------- ECC */

SIM_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    DEV_PROLOGUE(__func__, device);
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jpath(r.g, "ecc"))
        return NVML_ERROR_NOT_SUPPORTED;
    *current = (unsigned int)sim_jint(r.g, "ecc.current", 0);
    *pending = (unsigned int)sim_jint(r.g, "ecc.pending", *current);
    return NVML_SUCCESS;
}

static const char *ecc_counter_name(unsigned int counterType)
{
    return counterType == 0 ? "volatile" : counterType == 1 ? "aggregate" : NULL;
}

static const char *ecc_error_name(unsigned int errorType)
{
    return errorType == 0 ? "corrected" : errorType == 1 ? "uncorrected" : NULL;
}

static nvmlReturn_t ecc_count(const cJSON *g, unsigned int errorType, unsigned int counterType, const char *where,
                              unsigned long long *count)
{
    const char *c = ecc_counter_name(counterType), *e = ecc_error_name(errorType);
    const cJSON *bucket;

    if (!c || !e || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jpath(g, "ecc"))
        return NVML_ERROR_NOT_SUPPORTED;
    bucket = sim_jpath(sim_jpath(sim_jpath(g, "ecc"), c), e);
    if (where) {
        *count = (unsigned long long)sim_jint(bucket, where, 0);
    } else {
        *count = (unsigned long long)sim_jint(bucket, "dram", 0) + (unsigned long long)sim_jint(bucket, "sram", 0);
    }
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                 nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    DEV_PROLOGUE(__func__, device);
    return ecc_count(r.g, errorType, counterType, NULL, eccCounts);
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                     nvmlEccCounterType_t counterType,
                                                     nvmlMemoryLocation_t locationType, unsigned long long *count)
{
    /* a MIG device reports its GPU's counters (the state counts errors per GPU); NVIDIA's nvidia-smi -q lists
     * a MIG device only when this succeeds for it */
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(__func__, device, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (locationType >= 8)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (locationType == 2)
        return ecc_count(r.g, errorType, counterType, "dram", count);
    if (locationType == 7)
        return ecc_count(r.g, errorType, counterType, "sram", count);
    return NVML_ERROR_NOT_SUPPORTED; /* L1/L2/RF/texture/CBU: not reported separately on Ampere and later */
}

/* ------------------------------------------------------------------------------------ retired pages */

static nvmlReturn_t retired_pages(const char *fn, nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                  unsigned int *pageCount, unsigned long long *addresses,
                                  unsigned long long *timestamps)
{
    const cJSON *list, *it;
    unsigned int n, i = 0;
    DEV_PROLOGUE(fn, device);

    if (!pageCount || cause > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jbool(r.g, "retired_pages.supported", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    list = sim_jpath(r.g, cause == 0 ? "retired_pages.sbe" : "retired_pages.dbe");
    n = (unsigned int)cJSON_GetArraySize(list);
    if (n == 0) {
        *pageCount = 0;
        return NVML_SUCCESS;
    }
    if (!addresses || *pageCount < n) {
        *pageCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    cJSON_ArrayForEach(it, list)
    {
        double v = 0, t = 0;
        if (cJSON_IsNumber(it)) {
            v = it->valuedouble;
        } else {
            sim_jnum(it, "address", &v);
            sim_jnum(it, "timestamp", &t);
        }
        addresses[i] = (unsigned long long)v;
        if (timestamps)
            timestamps[i] = (unsigned long long)t;
        i++;
    }
    *pageCount = n;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                               unsigned int *pageCount, unsigned long long *addresses)
{
    return retired_pages(__func__, device, cause, pageCount, addresses, NULL);
}

SIM_API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                  unsigned int *pageCount, unsigned long long *addresses,
                                                  unsigned long long *timestamps)
{
    return retired_pages(__func__, device, cause, pageCount, addresses, timestamps);
}

SIM_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    DEV_PROLOGUE(__func__, device);
    if (!isPending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jbool(r.g, "retired_pages.supported", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    *isPending = sim_jbool(r.g, "retired_pages.pending", 0) ? 1U : 0U;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                               unsigned int *isPending, unsigned int *failureOccurred)
{
    DEV_PROLOGUE(__func__, device);
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jbool(r.g, "remapped_rows.supported", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    *corrRows = (unsigned int)sim_jint(r.g, "remapped_rows.corrected", 0);
    *uncRows = (unsigned int)sim_jint(r.g, "remapped_rows.uncorrected", 0);
    *isPending = sim_jbool(r.g, "remapped_rows.pending", 0) ? 1U : 0U;
    *failureOccurred = sim_jbool(r.g, "remapped_rows.failure", 0) ? 1U : 0U;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values)
{
    DEV_PROLOGUE(__func__, device);
    if (!values)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jbool(r.g, "remapped_rows.supported", 0))
        return NVML_ERROR_NOT_SUPPORTED;
    values->max = (unsigned int)sim_jint(r.g, "remapped_rows.histogram.max", 0);
    values->high = (unsigned int)sim_jint(r.g, "remapped_rows.histogram.high", 0);
    values->partial = (unsigned int)sim_jint(r.g, "remapped_rows.histogram.partial", 0);
    values->low = (unsigned int)sim_jint(r.g, "remapped_rows.histogram.low", 0);
    values->none = (unsigned int)sim_jint(r.g, "remapped_rows.histogram.none", 0);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------- temperature */

SIM_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                              unsigned int *temp)
{
    DEV_PROLOGUE(__func__, device);
    if (sensorType != 0 || !temp)
        return NVML_ERROR_INVALID_ARGUMENT;
    return sim_get_u32(r.g, "temperature.gpu", temp);
}

SIM_API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temperature)
{
    double v;
    DEV_PROLOGUE(__func__, device);
    if (!temperature)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jnum(r.g, "temperature.gpu", &v))
        return NVML_ERROR_NOT_SUPPORTED;
    temperature->temperature = (int)v;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                                       unsigned int *temp)
{
    static const char *const keys[] = {"temperature.shutdown", "temperature.slowdown", "temperature.mem_max",
                                       "temperature.gpu_max"};
    DEV_PROLOGUE(__func__, device);
    if (thresholdType >= 8 || !temp)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (thresholdType >= 4)
        return NVML_ERROR_NOT_SUPPORTED; /* acoustic and GPS thresholds: no fan curve on these boards */
    return sim_get_u32(r.g, keys[thresholdType], temp);
}

/* -------------------------------------------------------------------------------------------- power */

SIM_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return get_u32(__func__, device, "power.usage_mw", power);
}

SIM_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return get_u32(__func__, device, "power.limit_mw", limit);
}

SIM_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return get_u32(__func__, device, "power.enforced_mw", limit);
}

SIM_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit)
{
    return get_u32(__func__, device, "power.default_mw", defaultLimit);
}

SIM_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                                  unsigned int *maxLimit)
{
    nvmlReturn_t rc2;
    DEV_PROLOGUE(__func__, device);
    if (!minLimit || !maxLimit)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc2 = sim_get_u32(r.g, "power.min_mw", minLimit);
    return rc2 != NVML_SUCCESS ? rc2 : sim_get_u32(r.g, "power.max_mw", maxLimit);
}

SIM_API nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit)
{
    cJSON *power;
    DEV_PROLOGUE(__func__, device);
    power = sim_jpath(r.g, "power");
    if (!power)
        return NVML_ERROR_NOT_SUPPORTED;
    if (limit < (unsigned int)sim_jint(power, "min_mw", 0) || limit > (unsigned int)sim_jint(power, "max_mw", 0))
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = sim_write_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_reresolve(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    power = sim_jpath(r.g, "power");
    sim_jset_num(power, "limit_mw", limit);
    sim_jset_num(power, "enforced_mw", limit);
    return sim_write_commit();
}

/* ------------------------------------------------------------------------------------------- clocks */

static nvmlReturn_t clock_info(const char *fn, nvmlDevice_t device, const char *which, nvmlClockType_t type,
                               unsigned int *clock)
{
    static const char *const names[] = {"graphics", "sm", "mem", "video"};
    char path[64];
    DEV_PROLOGUE(fn, device);
    if (!clock)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* past NVML_CLOCK_COUNT: the real H200 on 580 says NOT_SUPPORTED for the current clock, INVALID_ARGUMENT for
     * the maximum (getter dump); models without a real transcript INVALID_ARGUMENT for both */
    if (type >= 4)
        return strcmp(which, "current") == 0 && sim_model_nvml(r.g) ? NVML_ERROR_NOT_SUPPORTED
                                                                     : NVML_ERROR_INVALID_ARGUMENT;
    strcpy(path, "clocks.");
    strcat(path, which);
    strcat(path, ".");
    strcat(path, names[type]);
    return sim_get_u32(r.g, path, clock);
}

SIM_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    return clock_info(__func__, device, "current", type, clock);
}

SIM_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    return clock_info(__func__, device, "max", type, clock);
}

SIM_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return get_u64(__func__, device, "clock_event_reasons", reasons);
}

SIM_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return get_u64(__func__, device, "clock_event_reasons", reasons);
}

static nvmlReturn_t supported_reasons(const char *fn, nvmlDevice_t device, unsigned long long *reasons)
{
    DEV_PROLOGUE(fn, device);
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = SIM_SUPPORTED_CLOCK_REASONS;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return supported_reasons(__func__, device, reasons);
}

SIM_API nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return supported_reasons(__func__, device, reasons);
}

/* --------------------------------------------------------------------------------------------- PCIe */

SIM_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    return get_u32(__func__, device, "pcie.gen", currLinkGen);
}

SIM_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    return get_u32(__func__, device, "pcie.width", currLinkWidth);
}

SIM_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    return get_u32(__func__, device, "pcie.max_gen", maxLinkGen);
}

SIM_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    return get_u32(__func__, device, "pcie.max_width", maxLinkWidth);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGenDevice)
{
    return get_u32(__func__, device, "pcie.gpu_max_gen", maxLinkGenDevice);
}

SIM_API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    return get_u32(__func__, device, "pcie.replay_counter", value);
}

/* ------------------------------------------------------------------------------------------- NVLink */

static nvmlReturn_t nvlink_link(const sim_ref_t *r, unsigned int link, cJSON **entry)
{
    cJSON *links = sim_jpath(r->g, "nvlink.links");
    int n = cJSON_GetArraySize(links);
    if (n == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned int)n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *entry = cJSON_GetArrayItem(links, (int)link);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    cJSON *entry;
    DEV_PROLOGUE(__func__, device);
    rc = nvlink_link(&r, link, &entry);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!isActive)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = (cJSON_IsNumber(entry) && entry->valuedouble != 0) || cJSON_IsTrue(entry) ? 1U : 0U;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
    cJSON *entry;
    DEV_PROLOGUE(__func__, device);
    rc = nvlink_link(&r, link, &entry);
    if (rc != NVML_SUCCESS)
        return rc;
    return sim_get_u32(r.g, "nvlink.version", version);
}

SIM_API nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                     nvmlNvLinkErrorCounter_t counter, unsigned long long *counterValue)
{
    static const char *const names[] = {"replay", "recovery", "crc_flit", "crc_data", "ecc_data"};
    cJSON *entry;
    DEV_PROLOGUE(__func__, device);
    rc = nvlink_link(&r, link, &entry);
    if (rc != NVML_SUCCESS)
        return rc;
    if (counter >= 5 || !counterValue)
        return NVML_ERROR_INVALID_ARGUMENT;
    *counterValue =
        (unsigned long long)sim_jint(cJSON_GetArrayItem(sim_jpath(r.g, "nvlink.errors"), (int)link), names[counter], 0);
    return NVML_SUCCESS;
}
