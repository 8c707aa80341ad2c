# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""The ``attributes:`` blocks gpufleet's modules share (one wording of check mode, diff mode and idempotence).

Use in a module's DOCUMENTATION::

    extends_documentation_fragment:
      - gpufleet.nvidia.attributes.read_only     # reads only
      - gpufleet.nvidia.attributes.facts         # also returns ansible_facts
      - gpufleet.nvidia.attributes.changes       # compares, then acts; check mode and diff supported
"""

from __future__ import annotations


class ModuleDocFragment:
    # The base fragment (gpufleet.nvidia.attributes) is the read-only one.
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: Never changes anything.
"""

    READ_ONLY = DOCUMENTATION

    FACTS = r"""
attributes:
  facts:
    support: full
    description: The result is also returned under C(ansible_facts).
"""

    CHANGES = r"""
attributes:
  check_mode:
    support: full
    description: Computes the change and reports it, touching nothing.
  diff_mode:
    support: full
    description: Returns the state before and after the change.
  idempotent:
    support: full
    description: A host already in the wanted state gets no action and RV(changed=false).
"""
