"""infra/terraform run for real on a copy: the terraform binary and a local copy of the AWS provider (a filesystem
mirror; nothing is downloaded), fake credentials, no API call. Plans only: what an apply would create, and the
outputs that do not wait for one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TF = ROOT / "infra" / "terraform"

_FAKE_PROVIDER = ('provider "aws" {\n  region = var.region\n  access_key = "AKIAEXAMPLE"\n  secret_key = "example"\n'
                  "  skip_credentials_validation = true\n  skip_requesting_account_id = true\n"
                  "  skip_metadata_api_check = true\n  skip_region_validation = true\n}\n")

# A stand-in for modules/datacenter whose outputs are known at plan time: its instances' addresses are what an
# apply would give (name-role-N in the role's /24), so the root's own expressions (the inventory) can be planned.
_KNOWN_HOSTS_MODULE = """
locals {
  counts = { zookeeper = var.zookeeper_count, broker = var.broker_count, mirror = var.mirror_count,
             loader = var.loader_count, spark_worker = var.spark_worker_count }
  short  = { zookeeper = "zk", broker = "broker", mirror = "mirror", loader = "loader", spark_worker = "spark" }
  subnet = { zookeeper = 1, broker = 2, mirror = 3, loader = 4, spark_worker = 5 }
}
output "hosts" {
  value = { for role, n in local.counts : role => [for i in range(n) : {
    name = "${var.name}-${local.short[role]}-${i + 1}", id = "i-${var.name}-${role}-${i}",
    private_ip = cidrhost(cidrsubnet(var.vpc_cidr, 8, local.subnet[role]), 11 + i) }] }
}
output "vpc_id" { value = "vpc-${var.name}" }
output "vpc_cidr" { value = var.vpc_cidr }
output "private_route_table_id" { value = "rtb-${var.name}" }
output "security_group_ids" {
  value = { for r in ["admin", "zookeeper", "broker", "mirror", "loader", "spark_worker"] : r => "sg-${var.name}-${r}" }
}
"""


def terraform_with_provider() -> tuple[str, Path]:
    """The terraform binary and a directory holding the AWS provider (a filesystem mirror), or a skip."""
    binary = shutil.which("terraform") or shutil.which("tofu")
    if binary is None:
        pytest.skip("no terraform or tofu binary here (not in Debian's archive: tests/infra/test_terraform.py)")
    for d in (os.environ.get("FERRY_TF_PLUGIN_DIR"), "/opt/tf-plugins", str(Path.home() / ".terraform.d" / "plugins")):
        if d and list(Path(d).glob("registry.terraform.io/hashicorp/aws/*/*/terraform-provider-aws*")):
            return binary, Path(d)
    pytest.skip("terraform is here but no local copy of the AWS provider (FERRY_TF_PLUGIN_DIR) to init with")


class TerraformCopy:
    """infra/terraform copied under `work` with the example variables and fake credentials, initialised from the
    local provider; known_hosts: both datacenters' module replaced by the stand-in above (the root's own code
    unchanged), so that outputs built from the hosts are known in a plan."""

    def __init__(self, work: Path, known_hosts: bool = False) -> None:
        self.binary, plugins = terraform_with_provider()
        self.work = work
        shutil.copytree(TF, work, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
        shutil.copy(work / "terraform.tfvars.example", work / "terraform.tfvars")
        override = _FAKE_PROVIDER
        if known_hosts:
            stub = work / "known_hosts_datacenter"
            stub.mkdir()
            shutil.copy(TF / "modules" / "datacenter" / "variables.tf", stub / "variables.tf")
            (stub / "outputs.tf").write_text(_KNOWN_HOSTS_MODULE)
            override += "".join(f'module "{dc}" {{\n  source = "./known_hosts_datacenter"\n}}\n'
                                for dc in ("live", "offline"))
        (work / "override.tf").write_text(override)
        rc = work.parent / f"{work.name}.terraformrc"
        rc.write_text(f'provider_installation {{\n  filesystem_mirror {{ path = "{plugins}" }}\n}}\n')
        self.env = dict(os.environ, TF_CLI_CONFIG_FILE=str(rc), TF_IN_AUTOMATION="1", CHECKPOINT_DISABLE="1")
        self.run("init", "-backend=false", "-input=false", "-no-color")

    def run(self, *args: str) -> str:
        p = subprocess.run([self.binary, *args], cwd=self.work, env=self.env, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, f"terraform {args[0]}: {p.stdout[-3000:]}{p.stderr[-3000:]}"
        return p.stdout

    def plan(self, *variables: str) -> dict:
        """`terraform plan` with `-var NAME=VALUE` for each of `variables`, as `terraform show -json` gives it."""
        self.run("plan", "-refresh=false", "-input=false", "-no-color", "-out=plan.out",
                 *(a for v in variables for a in ("-var", v)))
        return json.loads(self.run("show", "-json", "plan.out"))
