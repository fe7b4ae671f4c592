"""tests/infra: images, Ansible on container hosts, Terraform checks. Helpers live beside this file."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
