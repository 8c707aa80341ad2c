/*
 * nvmlsim_topo.c - the host topology NVML's public functions report, from the state:
 * nvmlDeviceGetTopologyCommonAncestor, nvmlDeviceGetTopologyNearestGpus, nvmlSystemGetTopologyGpuSet,
 * nvmlDeviceGetP2PStatus (and, through sim_nvlinks_between, the export-table slot behind `nvidia-smi topo -m`).
 *
 * The state has no PCIe tree and no NUMA layout (docs/simulator.md): every GPU sits near every online CPU of the
 * host, in one NUMA node, so two GPUs meet through the host bridges of that node (NVML_TOPOLOGY_NODE).
 * NVLink: two GPUs are linked when both have NVLinks up and each is among the other's "nvlink.peers" (the GPU
 * indices its NVLink bridges reach); a GPU without "peers" reaches every GPU with NVLinks, as through NVSwitches.
 * The links between them are the smaller count of links up. P2P (read, write, atomics, NVLink) is OK between
 * linked GPUs; any other pair, and P2P over PCIe, answers NVML_P2P_STATUS_NOT_SUPPORTED: whether PCIe P2P works
 * depends on a chipset the state does not describe, and the simulator does not claim it.
 * NVLink capabilities (nvidia-smi nvlink -c) per link of the state, as public `nvidia-smi nvlink -c` transcripts of
 * A100 and H800 boards show them (every capability true but "Link is supported" false; inferred for the others).
 */
#include <string.h>
#include <unistd.h>

#include "nvmlsim.h"

#define DEV_PROLOGUE(fn, device)                                 \
    SIM_LOCKED;                                                  \
    sim_ref_t r;                                                 \
    nvmlReturn_t rc = sim_dev((fn), (device), 0, &r);            \
    if (rc != NVML_SUCCESS)                                      \
        return rc

#define P2P_INDEX_READ 0
#define P2P_INDEX_WRITE 1
#define P2P_INDEX_NVLINK 2
#define P2P_INDEX_ATOMICS 3
#define P2P_INDEX_PCI 4
#define P2P_STATUS_OK 0
#define P2P_STATUS_NOT_SUPPORTED 5
#define TOPOLOGY_INTERNAL 0
#define TOPOLOGY_NODE 40

/* is GPU index `other` among g's nvlink.peers (or has g no peers list: a switched fabric)? */
static int reaches(const cJSON *g, long long other)
{
    const cJSON *peers = sim_jpath(g, "nvlink.peers");
    const cJSON *peer;
    if (!cJSON_IsArray(peers))
        return 1;
    cJSON_ArrayForEach(peer, peers)
    {
        if (cJSON_IsNumber(peer) && (long long)peer->valuedouble == other)
            return 1;
    }
    return 0;
}

unsigned int sim_nvlinks_between(const cJSON *a, const cJSON *b)
{
    unsigned int up_a = sim_nvlinks_up(a), up_b = sim_nvlinks_up(b);
    if (a == b || !reaches(a, sim_jint(b, "index", -1)) || !reaches(b, sim_jint(a, "index", -1)))
        return 0;
    return up_a < up_b ? up_a : up_b;
}

SIM_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                         int *pathInfo)
{
    int gpu1;
    DEV_PROLOGUE(__func__, device1);
    gpu1 = r.gpu;
    if ((rc = sim_dev(__func__, device2, 0, &r)) != NVML_SUCCESS)
        return rc;
    if (!pathInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pathInfo = gpu1 == r.gpu ? TOPOLOGY_INTERNAL : TOPOLOGY_NODE;
    return NVML_SUCCESS;
}

/* hand out the handles of the GPUs in `want` (a bit per index); *count 0 asks for the number */
static nvmlReturn_t gpu_set(const int *want, int n, unsigned int *count, nvmlDevice_t *deviceArray)
{
    unsigned int found = 0, room;
    int i;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < n; i++)
        found += want[i] ? 1U : 0U;
    room = *count;
    *count = found;
    if (room == 0)
        return NVML_SUCCESS;
    if (!deviceArray)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (room < found)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (i = 0, found = 0; i < n; i++) {
        if (want[i])
            deviceArray[found++] = &g_sim_dev[i];
    }
    return NVML_SUCCESS;
}

/* the other GPUs whose common ancestor with this one is at `level` or nearer: all of them from NODE on */
SIM_API nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, int level,
                                                      unsigned int *count, nvmlDevice_t *deviceArray)
{
    int want[SIM_MAX_GPUS] = {0};
    int i, n;
    DEV_PROLOGUE(__func__, device);
    n = sim_gpu_count();
    for (i = 0; i < n && i < SIM_MAX_GPUS; i++)
        want[i] = i != r.gpu && level >= TOPOLOGY_NODE;
    return gpu_set(want, n < SIM_MAX_GPUS ? n : SIM_MAX_GPUS, count, deviceArray);
}

/* the GPUs near CPU `cpuNumber`: every GPU, for every online CPU */
SIM_API nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count,
                                                 nvmlDevice_t *deviceArray)
{
    SIM_LOCKED;
    int want[SIM_MAX_GPUS] = {0};
    int i, n;
    nvmlReturn_t rc = sim_begin(__func__);
    if (rc != NVML_SUCCESS)
        return rc;
    if ((long)cpuNumber >= sysconf(_SC_NPROCESSORS_ONLN))
        return NVML_ERROR_INVALID_ARGUMENT;
    n = sim_gpu_count();
    for (i = 0; i < n && i < SIM_MAX_GPUS; i++)
        want[i] = 1;
    return gpu_set(want, n < SIM_MAX_GPUS ? n : SIM_MAX_GPUS, count, deviceArray);
}

SIM_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                            int p2pIndex, int *p2pStatus)
{
    cJSON *g1;
    DEV_PROLOGUE(__func__, device1);
    g1 = r.g;
    if ((rc = sim_dev(__func__, device2, 0, &r)) != NVML_SUCCESS)
        return rc;
    if (!p2pStatus || p2pIndex < P2P_INDEX_READ || p2pIndex > P2P_INDEX_PCI)
        return NVML_ERROR_INVALID_ARGUMENT;
    *p2pStatus = p2pIndex != P2P_INDEX_PCI && sim_nvlinks_between(g1, r.g) ? P2P_STATUS_OK
                                                                                 : P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* nvmlNvLinkCapability_t: P2P, system memory access, P2P atomics, system memory atomics, SLI bridge, valid */
static const unsigned int NVLINK_CAPS[] = {1U, 1U, 1U, 1U, 1U, 0U};

SIM_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, int capability,
                                                   unsigned int *capResult)
{
    int links;
    DEV_PROLOGUE(__func__, device);
    links = cJSON_GetArraySize(sim_jpath(r.g, "nvlink.links"));
    if (links == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned int)links || !capResult || capability < 0 ||
        capability >= (int)(sizeof(NVLINK_CAPS) / sizeof(NVLINK_CAPS[0])))
        return NVML_ERROR_INVALID_ARGUMENT;
    *capResult = NVLINK_CAPS[capability];
    return NVML_SUCCESS;
}
