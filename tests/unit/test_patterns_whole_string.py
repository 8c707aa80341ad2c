"""Inventory strings are matched whole: no role pattern ends in ``$``.

Ansible's ``match`` test is ``re.match``, and ``$`` matches before a final newline as well as at the end: with
``'^[A-Za-z0-9._-]+$'`` the node name ``"gpu-a\\n"`` passes and its newline reaches gres.conf. The roles' patterns
end in ``\\Z`` (the end of the string, nothing after it). The behaviour is proven in
tests/unit/baseline/test_baseline_inputs.py (slurm_gres); this test keeps new patterns from going
back to ``$``.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: a Jinja match/regex test or filter whose pattern (a quoted literal) ends in $
DOLLAR_PATTERN = re.compile(r"""(?:\bmatch|\bregex|'match'|"match")\s*[(,]\s*(?:[^'"]*,\s*)?(['"])[^'"]*\$\1""")


def test_the_checker_finds_a_pattern_that_ends_in_dollar() -> None:
    assert DOLLAR_PATTERN.search("- name is match('^[a-z]+$')")
    assert DOLLAR_PATTERN.search("| rejectattr('field', 'match', '^DCGM_FI_[A-Z0-9_]+$')")
    assert not DOLLAR_PATTERN.search("- name is match('^[a-z]+\\Z')")


def test_no_role_or_playbook_pattern_ends_in_dollar() -> None:
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in sorted([*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("roles/*/vars/*.yml"),
                                 *REPO.glob("roles/*/handlers/*.yml"), *REPO.glob("playbooks/**/*.yml")])
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if DOLLAR_PATTERN.search(line) or re.search(r"_re:\s*'[^']*\$'", line)]
    assert found == []
