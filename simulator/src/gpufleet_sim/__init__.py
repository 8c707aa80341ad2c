"""The simulated NVIDIA driver stack (see docs/simulator.md)."""
