/*
 * nvmlsim_device.c - device enumeration, identity, memory, modes (persistence, compute), performance
 * state, utilization and running compute processes.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "nvmlsim.h"

#define MIB 1048576ULL

/* ------------------------------------------------------------------------------------ enumeration */

static nvmlReturn_t get_count(const char *fn, unsigned int *count)
{
    SIM_LOCKED;
    nvmlReturn_t rc = sim_begin(fn);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)sim_gpu_count();
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    return get_count(__func__, deviceCount);
}

SIM_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return get_count(__func__, deviceCount);
}

static nvmlReturn_t handle_by_index(const char *fn, unsigned int index, nvmlDevice_t *device)
{
    SIM_LOCKED;
    nvmlReturn_t rc = sim_begin(fn);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device || index >= (unsigned int)sim_gpu_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = sim_gpu_check((int)index, fn);
    if (rc != NVML_SUCCESS)
        return rc;
    *device = &g_sim_dev[index];
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return handle_by_index(__func__, index, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return handle_by_index(__func__, index, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    SIM_LOCKED;
    nvmlReturn_t rc = sim_begin(__func__);
    int i, n;
    char mig_uuid[96];

    if (rc != NVML_SUCCESS)
        return rc;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    n = sim_gpu_count();
    for (i = 0; i < n; i++) {
        cJSON *g = sim_gpu_json(i);
        const char *u = sim_jstr(g, "uuid");
        int gis[SIM_MAX_GI * SIM_MAX_CI], cis[SIM_MAX_GI * SIM_MAX_CI], k, m;

        if (u && strcasecmp(u, uuid) == 0) {
            rc = sim_gpu_check(i, __func__);
            if (rc == NVML_SUCCESS)
                *device = &g_sim_dev[i];
            return rc;
        }
        if (strncasecmp(uuid, "MIG-", 4) != 0)
            continue;
        m = sim_mig_devices(g, gis, cis, SIM_MAX_GI * SIM_MAX_CI);
        for (k = 0; k < m; k++) {
            sim_mig_uuid(g, gis[k], cis[k], mig_uuid, sizeof(mig_uuid));
            if (strcasecmp(mig_uuid, uuid) == 0) {
                rc = sim_gpu_check(i, __func__);
                if (rc == NVML_SUCCESS)
                    *device = &g_sim_migdev[i][gis[k]][cis[k]];
                return rc;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    SIM_LOCKED;
    nvmlReturn_t rc = sim_begin(__func__);
    int i, n;

    if (rc != NVML_SUCCESS)
        return rc;
    if (!serial || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    n = sim_gpu_count();
    for (i = 0; i < n; i++) {
        const char *s = sim_jstr(sim_gpu_json(i), "serial");
        if (s && strcmp(s, serial) == 0) {
            rc = sim_gpu_check(i, __func__);
            if (rc == NVML_SUCCESS)
                *device = &g_sim_dev[i];
            return rc;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* "DDDDDDDD:BB:DD.F", "DDDD:BB:DD.F" or "BB:DD.F" (hex, any case) */
static int parse_bus_id(const char *s, unsigned int *domain, unsigned int *bus, unsigned int *dev)
{
    unsigned int a, b, c, d;
    char tail;
    if (sscanf(s, "%x:%x:%x.%x%c", &a, &b, &c, &d, &tail) == 4) {
        *domain = a;
        *bus = b;
        *dev = c;
        return 1;
    }
    if (sscanf(s, "%x:%x.%x%c", &b, &c, &d, &tail) == 3) {
        *domain = 0;
        *bus = b;
        *dev = c;
        return 1;
    }
    return 0;
}

static nvmlReturn_t handle_by_bus_id(const char *fn, const char *pciBusId, nvmlDevice_t *device)
{
    SIM_LOCKED;
    nvmlReturn_t rc = sim_begin(fn);
    unsigned int domain, bus, dev;
    int i, n;

    if (rc != NVML_SUCCESS)
        return rc;
    if (!pciBusId || !device || !parse_bus_id(pciBusId, &domain, &bus, &dev))
        return NVML_ERROR_INVALID_ARGUMENT;
    n = sim_gpu_count();
    for (i = 0; i < n; i++) {
        cJSON *g = sim_gpu_json(i);
        if (sim_jint(g, "pci.domain", -1) == domain && sim_jint(g, "pci.bus", -1) == bus &&
            sim_jint(g, "pci.device", -1) == dev) {
            rc = sim_gpu_check(i, fn);
            if (rc == NVML_SUCCESS)
                *device = &g_sim_dev[i];
            return rc;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    return handle_by_bus_id(__func__, pciBusId, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return handle_by_bus_id(__func__, pciBusId, device);
}

/* ------------------------------------------------------------------------------------------ identity */

SIM_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    SIM_LOCKED;
    sim_ref_t r;
    int gis[SIM_MAX_GI * SIM_MAX_CI], cis[SIM_MAX_GI * SIM_MAX_CI], n, k;
    /* a MIG device handle answers its index among its GPU's MIG devices (the "MIG Dev" column of nvidia-smi),
     * the index nvmlDeviceGetMigDeviceHandleByIndex takes */
    nvmlReturn_t rc = sim_dev(__func__, device, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (r.gi >= 0) {
        n = sim_mig_devices(r.g, gis, cis, SIM_MAX_GI * SIM_MAX_CI);
        for (k = 0; k < n; k++) {
            if (gis[k] == r.gi && cis[k] == r.ci) {
                *index = (unsigned int)k;
                return NVML_SUCCESS;
            }
        }
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *index = (unsigned int)r.gpu;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    SIM_LOCKED;
    sim_ref_t r;
    char buf[256];
    nvmlReturn_t rc = sim_dev(__func__, device, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (r.gi < 0)
        return sim_copy_str(sim_jstr(r.g, "name"), name, length);
    sim_mig_device_name(r.g, r.gio, r.cio, buf, sizeof(buf));
    return sim_copy_str(buf, name, length);
}

SIM_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    SIM_LOCKED;
    sim_ref_t r;
    char buf[96];
    nvmlReturn_t rc = sim_dev(__func__, device, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (r.gi < 0)
        return sim_copy_str(sim_jstr(r.g, "uuid"), uuid, length);
    sim_mig_uuid(r.g, r.gi, r.ci, buf, sizeof(buf));
    return sim_copy_str(buf, uuid, length);
}

static nvmlReturn_t get_string(const char *fn, nvmlDevice_t device, const char *key, char *buf, unsigned int length)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(fn, device, 0, &r);
    return rc != NVML_SUCCESS ? rc : sim_copy_str(sim_jstr(r.g, key), buf, length);
}

SIM_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    return get_string(__func__, device, "serial", serial, length);
}

SIM_API nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    return get_string(__func__, device, "board_part_number", partNumber, length);
}

SIM_API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    return get_string(__func__, device, "vbios_version", version, length);
}

SIM_API nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    return get_string(__func__, device, "inforom_image_version", version, length);
}

SIM_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    SIM_LOCKED;
    sim_ref_t r;
    const char *bus_id;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    bus_id = sim_jstr(r.g, "pci.bus_id");
    if (!bus_id)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(pci, 0, sizeof(*pci));
    pci->domain = (unsigned int)sim_jint(r.g, "pci.domain", 0);
    pci->bus = (unsigned int)sim_jint(r.g, "pci.bus", 0);
    pci->device = (unsigned int)sim_jint(r.g, "pci.device", 0);
    pci->pciDeviceId = (unsigned int)sim_jint(r.g, "pci.pci_device_id", 0);
    pci->pciSubSystemId = (unsigned int)sim_jint(r.g, "pci.pci_subsystem_id", 0);
    snprintf(pci->busId, sizeof(pci->busId), "%s", bus_id);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", pci->domain & 0xFFFFU, pci->bus,
             pci->device);
    return NVML_SUCCESS;
}

static nvmlReturn_t get_u32(const char *fn, nvmlDevice_t device, const char *path, unsigned int *out)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(fn, device, 0, &r);
    return rc != NVML_SUCCESS ? rc : sim_get_u32(r.g, path, out);
}

SIM_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return get_u32(__func__, device, "minor_number", minorNumber);
}

SIM_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    return get_u32(__func__, device, "brand", type);
}

SIM_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    return get_u32(__func__, device, "architecture", arch);
}

SIM_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    SIM_LOCKED;
    sim_ref_t r;
    cJSON *cc;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    cc = sim_jpath(r.g, "compute_capability");
    if (cJSON_GetArraySize(cc) != 2)
        return NVML_ERROR_NOT_SUPPORTED;
    *major = cJSON_GetArrayItem(cc, 0)->valueint;
    *minor = cJSON_GetArrayItem(cc, 1)->valueint;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------- memory */

unsigned long long sim_processes_mib(const cJSON *g, int gi, int ci)
{
    const cJSON *p;
    unsigned long long sum = 0;
    cJSON_ArrayForEach(p, sim_jpath(g, "processes"))
    {
        if (gi >= 0 && sim_jint(p, "gi_id", -1) != gi)
            continue;
        if (ci >= 0 && sim_jint(p, "ci_id", -1) != ci)
            continue;
        sum += (unsigned long long)sim_jint(p, "used_memory_mib", 0);
    }
    return sum;
}

/* total, reserved, used in bytes; MIG devices report their GPU instance's memory */
static void memory_of(const sim_ref_t *r, unsigned long long *total, unsigned long long *reserved,
                      unsigned long long *used)
{
    if (r->gi >= 0) {
        cJSON *prof = sim_gi_profile_by_id(r->g, (unsigned int)sim_jint(r->gio, "profile_id", -1));
        *total = (unsigned long long)sim_jint(prof, "memory_mib", 0) * MIB;
        *reserved = 0;
        *used = sim_processes_mib(r->g, r->gi, -1) * MIB;
    } else {
        *total = (unsigned long long)sim_jint(r->g, "memory.total_mib", 0) * MIB;
        *reserved = (unsigned long long)sim_jint(r->g, "memory.reserved_mib", 0) * MIB;
        /* memory.used_mib is the whole GPU's use, processes included: the writers (gpusim process add/remove)
         * keep it in step, so the processes are not added a second time here */
        *used = (unsigned long long)sim_jint(r->g, "memory.used_mib", 0) * MIB;
    }
    if (*reserved + *used > *total)
        *used = *total > *reserved ? *total - *reserved : 0;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    SIM_LOCKED;
    sim_ref_t r;
    unsigned long long total, reserved, used;
    nvmlReturn_t rc = sim_dev(__func__, device, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory_of(&r, &total, &reserved, &used);
    memory->total = total;
    memory->used = reserved + used;
    memory->free = total - reserved - used;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    SIM_LOCKED;
    sim_ref_t r;
    unsigned long long total, reserved, used;
    nvmlReturn_t rc = sim_dev(__func__, device, SIM_F_MIG_OK, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory_of(&r, &total, &reserved, &used);
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - reserved - used;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------- modes */

SIM_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    return get_u32(__func__, device, "persistence_mode", mode);
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    return get_u32(__func__, device, "compute_mode", mode);
}

SIM_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    return get_u32(__func__, device, "performance_state", pState);
}

/* root-only setter of one top-level number of the GPU object */
static nvmlReturn_t set_number(const char *fn, nvmlDevice_t device, const char *key, double value)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(fn, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_write_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = sim_reresolve(&r);
    if (rc != NVML_SUCCESS)
        return rc;
    sim_jset_num(r.g, key, value);
    return sim_write_commit();
}

SIM_API nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode)
{
    if (mode > 1) {
        SIM_LOCKED;
        sim_ref_t r;
        nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
        return rc != NVML_SUCCESS ? rc : NVML_ERROR_INVALID_ARGUMENT;
    }
    return set_number(__func__, device, "persistence_mode", mode);
}

SIM_API nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode)
{
    if (mode == 1 || mode >= 4) {
        SIM_LOCKED;
        sim_ref_t r;
        nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
        if (rc != NVML_SUCCESS)
            return rc;
        return mode == 1 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    }
    return set_number(__func__, device, "compute_mode", mode);
}

SIM_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    SIM_LOCKED;
    sim_ref_t r;
    nvmlReturn_t rc = sim_dev(__func__, device, 0, &r);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jpath(r.g, "utilization"))
        return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = (unsigned int)sim_jint(r.g, "utilization.gpu", 0);
    utilization->memory = (unsigned int)sim_jint(r.g, "utilization.memory", 0);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------- processes */

/* the kinds a state process has: "type" "C" (default), "G" or "C+G", as nvidia-smi's Type column */
int sim_process_kind(const cJSON *p)
{
    const char *type = sim_jstr(p, "type");
    if (!type || strcmp(type, "C") == 0)
        return SIM_PROC_COMPUTE;
    if (strcmp(type, "G") == 0)
        return SIM_PROC_GRAPHICS;
    if (strcmp(type, "C+G") == 0)
        return SIM_PROC_COMPUTE | SIM_PROC_GRAPHICS;
    return 0;
}

static int process_listed(const cJSON *p, const sim_ref_t *r, int kind)
{
    if (!(sim_process_kind(p) & kind))
        return 0;
    return r->gi < 0 || (sim_jint(p, "gi_id", -1) == r->gi && sim_jint(p, "ci_id", -1) == r->ci);
}

/* The processes of one kind on a GPU or MIG device, into nvmlProcessInfo_t (infos) or the export table's
 * records (details), whichever is not NULL; NVML's count protocol (INSUFFICIENT_SIZE with the count needed). */
nvmlReturn_t sim_list_processes(const char *fn, nvmlDevice_t device, int kind, unsigned int *infoCount,
                                nvmlProcessInfo_t *infos, sim_process_detail_t *details)
{
    SIM_LOCKED;
    sim_ref_t r;
    const cJSON *p;
    unsigned int n = 0, i = 0;
    nvmlReturn_t rc = sim_dev(fn, device, SIM_F_MIG_OK, &r);

    if (rc != NVML_SUCCESS)
        return rc;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    cJSON_ArrayForEach(p, sim_jpath(r.g, "processes"))
    {
        if (process_listed(p, &r, kind))
            n++;
    }
    if (n == 0) {
        *infoCount = 0;
        return NVML_SUCCESS;
    }
    if ((!infos && !details) || *infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    cJSON_ArrayForEach(p, sim_jpath(r.g, "processes"))
    {
        double mib;
        unsigned int pid = (unsigned int)sim_jint(p, "pid", 0);
        unsigned long long used =
            sim_jnum(p, "used_memory_mib", &mib) ? (unsigned long long)mib * MIB : NVML_VALUE_NOT_AVAILABLE_ULL;
        unsigned int gi = (unsigned int)sim_jint(p, "gi_id", NVML_INVALID_ID);
        unsigned int ci = (unsigned int)sim_jint(p, "ci_id", NVML_INVALID_ID);
        if (!process_listed(p, &r, kind))
            continue;
        if (infos) {
            infos[i].pid = pid;
            infos[i].usedGpuMemory = used;
            infos[i].gpuInstanceId = gi;
            infos[i].computeInstanceId = ci;
        } else {
            memset(&details[i], 0, sizeof(details[i]));
            details[i].pid = pid;
            details[i].usedGpuMemory = used;
            details[i].gpuInstanceId = gi;
            details[i].computeInstanceId = ci;
            snprintf(details[i].name, sizeof(details[i].name), "%s", sim_jstr(p, "name") ? sim_jstr(p, "name") : "");
        }
        i++;
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{
    return sim_list_processes(__func__, device, SIM_PROC_COMPUTE, infoCount, infos, NULL);
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{
    return sim_list_processes(__func__, device, SIM_PROC_COMPUTE, infoCount, infos, NULL);
}

/* the name of a simulated compute process (state), else the live process's comm, else NOT_FOUND */
SIM_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    SIM_LOCKED;
    char path[64], comm[256];
    FILE *f;
    int i, n;
    nvmlReturn_t rc = sim_begin(__func__);

    if (rc != NVML_SUCCESS)
        return rc;
    if (!name || length == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    n = sim_gpu_count();
    for (i = 0; i < n; i++) {
        const cJSON *p;
        cJSON_ArrayForEach(p, sim_jpath(sim_gpu_json(i), "processes"))
        {
            if (sim_jint(p, "pid", -1) == (long long)pid && sim_jstr(p, "name"))
                return sim_copy_str(sim_jstr(p, "name"), name, length);
        }
    }
    snprintf(path, sizeof(path), "/proc/%u/comm", pid);
    f = fopen(path, "re");
    if (!f)
        return NVML_ERROR_NOT_FOUND;
    if (!fgets(comm, sizeof(comm), f)) {
        fclose(f);
        return NVML_ERROR_NOT_FOUND;
    }
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    return sim_copy_str(comm, name, length);
}
