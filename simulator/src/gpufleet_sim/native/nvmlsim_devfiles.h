/*
 * nvmlsim_devfiles.h - the simulated driver's device files (see nvmlsim_devfiles.c).
 */
#ifndef NVMLSIM_DEVFILES_H
#define NVMLSIM_DEVFILES_H

/* Bring /proc/driver/nvidia{,-caps} and /dev/nvidia* in step with the loaded state (caller holds the lock). */
void sim_devfiles_sync(void);
/* sim_write_commit(), then sim_devfiles_sync() when the commit succeeded: every MIG change goes through it. */
nvmlReturn_t sim_commit_devfiles(void);
/* Same, only when the files were never written (first MIG query after a boot). */
void sim_devfiles_ensure(void);
/* The nvidia-caps minor of a GPU instance (ci < 0) or of a compute instance, as the driver numbers them. */
unsigned int sim_cap_minor(unsigned int gpu, unsigned int gi, int ci);

#endif
