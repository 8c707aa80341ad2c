"""Throw-away systemd test hosts (podman + runc, host network) for the simulated GPU fleet.

``image`` builds the host image, ``hosts`` starts and stops hosts with a simulated GPU preset each,
``fleet`` brings up a named fleet from ``inventories/sim`` together with the local apt repository, and
``demo`` runs the README's main job against it. See ``docs/testing.md``.
"""
