"""A test oracle: NVIDIA k8s-device-plugin's config rules (api/config/v1), ported to Python. Test code only."""
