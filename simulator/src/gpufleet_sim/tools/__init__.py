"""The simulated NVIDIA command-line tools (one module per tool) and their systemd units (``*.service``)."""
