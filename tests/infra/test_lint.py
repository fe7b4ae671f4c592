"""ansible-lint (production profile) is clean on infra/ansible."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_ansible_lint_is_clean() -> None:
    p = subprocess.run([str(VENV_BIN / "ansible-lint"), "--nocolor", "-q"], cwd=ROOT / "infra" / "ansible",
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PATH=f"{VENV_BIN}:{os.environ['PATH']}", NO_COLOR="1"))
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-6000:]


@pytest.mark.slow
def test_playbooks_pass_syntax_check() -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "infra" / "ansible" / "ansible.cfg"))
    for playbook in ("site.yml", "rolling_restart.yml", "rolling_upgrade.yml"):
        p = subprocess.run([str(VENV_BIN / "ansible-playbook"), "--syntax-check", playbook], cwd=ROOT / "infra" / "ansible",
                           capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
