/*
 * nvmlsim_devfiles.c - the device files the NVIDIA kernel driver keeps for MIG, kept in step with the state.
 *
 * The real driver (NVIDIA MIG user guide, "Device Nodes and Capabilities") publishes:
 *   /proc/driver/nvidia-caps/mig-minors            "config 1", "monitor 2", "gpu<N>/gi<G>/access <M>",
 *                                                  "gpu<N>/gi<G>/ci<C>/access <M>" for every possible instance
 *   /proc/driver/nvidia/capabilities/mig/{config,monitor}
 *   /proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>/access, .../gi<G>/ci<C>/access   (existing instances)
 *       each "DeviceFileMinor: <M>\nDeviceFileMode: <mode>\nDeviceFileModify: 1\n"
 *   /dev/nvidiactl, /dev/nvidia<minor>, /dev/nvidia-caps/nvidia-cap<M>
 * Minors: config 1, monitor 2, then per GPU 15 GPU instances x (1 GI + 8 CIs) = 135 minors:
 *   gi minor = 3 + gpu * 135 + gi * 9, ci minor = gi minor + 1 + ci.
 *
 * The simulator has no kernel module, so the files are written by the library itself after every MIG change
 * (and on the first MIG query when they do not exist yet). They are written only where <root>/proc/driver is
 * writable (a tmpfs the test host mounts there); on a normal host /proc/driver is procfs and nothing happens.
 * <root> is "" or $NVML_SIM_DEVROOT (tests point it at a folder). /dev nodes are character devices when mknod is
 * allowed, else empty regular files with the same mode: what readers (slurmd, container runtimes) check is
 * that the path exists.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "nvmlsim.h"
#include "nvmlsim_devfiles.h"

#define CAP_GIS 15
#define CAP_CIS 8
#define CAP_PER_GI (1 + CAP_CIS)
#define CAP_PER_GPU (CAP_GIS * CAP_PER_GI)
#define NVIDIA_MAJOR 195
#define NVIDIA_CTL_MINOR 255
#define NVIDIA_CAPS_MAJOR 237
#define MODE_CONFIG 0400
#define MODE_READ 0444

unsigned int sim_cap_minor(unsigned int gpu, unsigned int gi, int ci)
{
    unsigned int base = 3U + gpu * CAP_PER_GPU + gi * CAP_PER_GI;
    return ci < 0 ? base : base + 1U + (unsigned int)ci;
}

static const char *devroot(void)
{
    const char *root = getenv("NVML_SIM_DEVROOT");
    return root ? root : "";
}

static void mkdirs(const char *path)
{
    char buf[PATH_MAX];
    char *p;
    snprintf(buf, sizeof(buf), "%s", path);
    for (p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            (void)mkdir(buf, 0755);
            *p = '/';
        }
    }
    (void)mkdir(buf, 0755);
}

/* Whether <root>/proc/driver takes files (a tmpfs on a simulated host); creates <root>/proc/driver/nvidia. */
static int writable(void)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof(path), "%s/proc/driver/nvidia", devroot());
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return 0;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(path, W_OK) == 0;
}

static void write_text(const char *path, const char *text, mode_t mode)
{
    char tmp[PATH_MAX + 16];
    FILE *f;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (!f)
        return;
    fputs(text, f);
    if (fclose(f) == 0 && chmod(tmp, mode) == 0 && rename(tmp, path) == 0)
        return;
    (void)unlink(tmp);
}

static void write_access(const char *path, unsigned int minor, unsigned int mode)
{
    char text[128];
    snprintf(text, sizeof(text), "DeviceFileMinor: %u\nDeviceFileMode: %u\nDeviceFileModify: 1\n", minor, mode);
    write_text(path, text, 0444);
}

static void make_node(const char *path, unsigned int major, unsigned int minor, mode_t mode)
{
    struct stat st;
    int fd;
    if (lstat(path, &st) == 0)
        return;
    if (mknod(path, S_IFCHR | mode, makedev(major, minor)) == 0) {
        (void)chmod(path, mode);
        return;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0) {
        (void)fchmod(fd, mode);
        close(fd);
    }
}

static const cJSON *find_gi(const cJSON *g, int gi)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, sim_jpath(g, "mig.gpu_instances"))
    {
        if (sim_jint(it, "id", -1) == gi)
            return it;
    }
    return NULL;
}

static int has_ci(const cJSON *gio, int ci)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, sim_jpath(gio, "compute_instances"))
    {
        if (sim_jint(it, "id", -1) == ci)
            return 1;
    }
    return 0;
}

static void write_minors_table(const char *root, int gpus)
{
    size_t cap = 64 + (size_t)gpus * CAP_PER_GPU * 32, len = 0;
    char *text = malloc(cap), path[PATH_MAX];
    int gpu, gi, ci;
    if (!text)
        return;
    len += (size_t)snprintf(text + len, cap - len, "config 1\nmonitor 2\n");
    for (gpu = 0; gpu < gpus; gpu++)
        for (gi = 0; gi < CAP_GIS; gi++) {
            len += (size_t)snprintf(text + len, cap - len, "gpu%d/gi%d/access %u\n", gpu, gi,
                                    sim_cap_minor((unsigned int)gpu, (unsigned int)gi, -1));
            for (ci = 0; ci < CAP_CIS; ci++)
                len += (size_t)snprintf(text + len, cap - len, "gpu%d/gi%d/ci%d/access %u\n", gpu, gi, ci,
                                        sim_cap_minor((unsigned int)gpu, (unsigned int)gi, ci));
        }
    snprintf(path, sizeof(path), "%s/proc/driver/nvidia-caps", root);
    mkdirs(path);
    snprintf(path, sizeof(path), "%s/proc/driver/nvidia-caps/mig-minors", root);
    write_text(path, text, 0444);
    free(text);
}

static void sync_instance(const char *root, unsigned int index, const cJSON *g, int gi)
{
    char dir[PATH_MAX], path[PATH_MAX + 32], node[PATH_MAX];
    const cJSON *gio = sim_mig_enabled(g) ? find_gi(g, gi) : NULL;
    unsigned int minor = (unsigned int)sim_jint(g, "minor_number", (long long)index);
    int ci;

    snprintf(dir, sizeof(dir), "%s/proc/driver/nvidia/capabilities/gpu%u/mig/gi%d", root, minor, gi);
    for (ci = 0; ci < CAP_CIS; ci++) {
        int keep = gio && has_ci(gio, ci);
        unsigned int cap = sim_cap_minor(index, (unsigned int)gi, ci);
        snprintf(path, sizeof(path), "%s/ci%d", dir, ci);
        snprintf(node, sizeof(node), "%s/dev/nvidia-caps/nvidia-cap%u", root, cap);
        if (keep) {
            mkdirs(path);
            strncat(path, "/access", sizeof(path) - strlen(path) - 1);
            write_access(path, cap, 292);
            make_node(node, NVIDIA_CAPS_MAJOR, cap, MODE_READ);
        } else {
            char access_path[PATH_MAX + 48];
            snprintf(access_path, sizeof(access_path), "%s/access", path);
            (void)unlink(access_path);
            (void)rmdir(path);
            (void)unlink(node);
        }
    }
    snprintf(path, sizeof(path), "%s/access", dir);
    snprintf(node, sizeof(node), "%s/dev/nvidia-caps/nvidia-cap%u", root, sim_cap_minor(index, (unsigned int)gi, -1));
    if (gio) {
        mkdirs(dir);
        write_access(path, sim_cap_minor(index, (unsigned int)gi, -1), 292);
        make_node(node, NVIDIA_CAPS_MAJOR, sim_cap_minor(index, (unsigned int)gi, -1), MODE_READ);
    } else {
        (void)unlink(path);
        (void)rmdir(dir);
        (void)unlink(node);
    }
}

void sim_devfiles_sync(void)
{
    const char *root = devroot();
    char path[PATH_MAX];
    int gpus = sim_gpu_count(), gpu, gi;

    if (!writable())
        return;
    snprintf(path, sizeof(path), "%s/proc/driver/nvidia/capabilities/mig", root);
    mkdirs(path);
    snprintf(path, sizeof(path), "%s/proc/driver/nvidia/capabilities/mig/config", root);
    write_access(path, 1, MODE_CONFIG);
    snprintf(path, sizeof(path), "%s/proc/driver/nvidia/capabilities/mig/monitor", root);
    write_access(path, 2, MODE_READ);
    snprintf(path, sizeof(path), "%s/dev/nvidia-caps", root);
    mkdirs(path);
    snprintf(path, sizeof(path), "%s/dev/nvidiactl", root);
    make_node(path, NVIDIA_MAJOR, NVIDIA_CTL_MINOR, 0666);
    snprintf(path, sizeof(path), "%s/dev/nvidia-caps/nvidia-cap1", root);
    make_node(path, NVIDIA_CAPS_MAJOR, 1, MODE_CONFIG);
    snprintf(path, sizeof(path), "%s/dev/nvidia-caps/nvidia-cap2", root);
    make_node(path, NVIDIA_CAPS_MAJOR, 2, MODE_READ);
    for (gpu = 0; gpu < gpus; gpu++) {
        const cJSON *g = sim_gpu_json(gpu);
        unsigned int minor = (unsigned int)sim_jint(g, "minor_number", gpu);
        snprintf(path, sizeof(path), "%s/dev/nvidia%u", root, minor);
        make_node(path, NVIDIA_MAJOR, minor, 0666);
        if (!sim_jbool(g, "mig.supported", 0))
            continue;
        for (gi = 0; gi < CAP_GIS; gi++)
            sync_instance(root, (unsigned int)gpu, g, gi);
    }
    write_minors_table(root, gpus);
}

void sim_devfiles_ensure(void)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof(path), "%s/proc/driver/nvidia-caps/mig-minors", devroot());
    if (stat(path, &st) != 0)
        sim_devfiles_sync();
}

nvmlReturn_t sim_commit_devfiles(void)
{
    nvmlReturn_t rc = sim_write_commit();
    if (rc == NVML_SUCCESS)
        sim_devfiles_sync();
    return rc;
}
