"""Per-command views of a run's result for the ``gpufleet`` command; every module registers its own renderers."""
