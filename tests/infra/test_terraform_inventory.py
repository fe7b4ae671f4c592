"""The inventory infra/terraform renders, read by Ansible where the playbooks run (their ansible.cfg and
group_vars/): its groups and host variables, the connect strings the group_vars compute from it, and that every
setting Terraform passes in its all:vars is the value the playbooks see (the playbooks' group_vars/all.yml sets
the same names as defaults: ansible.cfg's precedence lets the inventory win)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from terraform_copy import TerraformCopy
from terraform_template import inventory_scope, render_tftpl, sample_hosts, variable_default

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "terraform" / "templates" / "inventory.yml.tftpl"
ANSIBLE_DIR = ROOT / "infra" / "ansible"
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"


def render_inventory(tmp_path: Path, **variables: Any) -> Path:
    """hosts.yml as `terraform output -raw ansible_inventory` writes it for the root's `variables` (a small
    layout)."""
    live = sample_hosts("live", "10.10", {"zookeeper": 3, "broker": 2})
    offline = sample_hosts("offline", "10.20", {"zookeeper": 1, "broker": 2, "loader": 1})
    inv = tmp_path / "hosts.yml"
    inv.write_text(render_tftpl(TEMPLATE.read_text(), inventory_scope(live, offline, **variables)))
    return inv


def ansible_sees(inventory: Path, hosts: str, expr: str) -> dict[str, object]:
    """{host: the value of the Jinja expression `expr`} as the playbooks would see it (ad hoc, with the playbook
    directory's ansible.cfg and group_vars/; debug runs on the controller, no host is reached)."""
    p = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(inventory), hosts, "--playbook-dir", str(ANSIBLE_DIR),
                        "-o", "-m", "ansible.builtin.debug", "-a", f"msg={{{{ {expr} }}}}"],
                       capture_output=True, text=True, timeout=120, cwd=ANSIBLE_DIR,
                       env=dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    seen = {m.group(1): json.loads(m.group(2))["msg"] for m in re.finditer(r"^(\S+) \| SUCCESS => (\{.*\})$",
                                                                            p.stdout, re.M)}
    assert seen, p.stdout
    return seen


@pytest.mark.slow
def test_inventory_template_renders_an_ansible_inventory(tmp_path: Path) -> None:
    live = sample_hosts("live", "10.10", {"zookeeper": 3, "broker": 2})
    offline = sample_hosts("offline", "10.20", {"zookeeper": 3, "broker": 2, "mirror": 2, "loader": 1,
                                                "spark_worker": 2})
    text = render_tftpl(TEMPLATE.read_text(), inventory_scope(live, offline))
    # plain YAML first: a clearer error than Ansible's; the ZooKeeper port opened is the one the playbooks use
    assert yaml.safe_load(text)["all"]["vars"]["ferry_zookeeper_tls"] is True
    inv = tmp_path / "hosts.yml"
    inv.write_text(text)
    p = subprocess.run([str(VENV_BIN / "ansible-inventory"), "-i", str(inv), "--list"], capture_output=True,
                       text=True, timeout=120, cwd=ANSIBLE_DIR,
                       env=dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg")))
    assert p.returncode == 0, p.stderr
    listing = json.loads(p.stdout)
    hosts = lambda g: set(listing.get(g, {}).get("hosts", []))  # noqa: E731
    assert hosts("live_zookeeper") == {"live-zk-1", "live-zk-2", "live-zk-3"}
    assert hosts("live_brokers") == {"live-broker-1", "live-broker-2"}
    assert hosts("offline_brokers") == {"offline-broker-1", "offline-broker-2"}
    assert hosts("mirror") == {"offline-mirror-1", "offline-mirror-2"}
    assert hosts("loader") == {"offline-loader-1"}
    assert hosts("spark_workers") == {"offline-spark-1", "offline-spark-2"}
    assert set(listing["live"]["children"]) == {"live_zookeeper", "live_brokers"}
    assert set(listing["zookeeper"]["children"]) == {"live_zookeeper", "offline_zookeeper"}
    hv = listing["_meta"]["hostvars"]
    assert [hv[f"live-broker-{i}"]["ferry_broker_id"] for i in (1, 2)] == [1, 2]
    assert hv["offline-zk-3"]["ferry_zookeeper_myid"] == 3
    assert hv["offline-loader-1"]["ansible_host"] == "10.20.4.11"
    assert hv["offline-loader-1"]["ferry_security"] == "sasl_ssl"  # Ansible's and Terraform's settings agree

    # The playbooks' group_vars turn it into the right connect strings for each datacenter.
    p = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(inv), "live-broker-2:offline-mirror-1", "-m",
                        "ansible.builtin.debug", "-a", "msg={{ ferry_zookeeper_connect }}|{{ ferry_live_zookeeper_connect }}"],
                       capture_output=True, text=True, timeout=120, cwd=ANSIBLE_DIR,
                       env=dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    live_zk = "10.10.1.11:2281,10.10.1.12:2281,10.10.1.13:2281/ferry/live"  # ZooKeeper over TLS by default
    offline_zk = "10.20.1.11:2281,10.20.1.12:2281,10.20.1.13:2281/ferry/offline"
    assert f'"msg": "{live_zk}|{live_zk}"' in p.stdout
    assert f'"msg": "{offline_zk}|{live_zk}"' in p.stdout

    # With spark_workers the loads' master is the Spark cluster on the first loader (roles/spark).
    p = subprocess.run([str(VENV_BIN / "ansible"), "-i", str(inv), "offline-loader-1:offline-spark-2", "-m",
                        "ansible.builtin.debug", "-a", "msg={{ spark_master_url | trim }}"],
                       capture_output=True, text=True, timeout=120, cwd=ANSIBLE_DIR,
                       env=dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count('"msg": "spark://10.20.4.11:7077"') == 2, p.stdout


def test_renderer_rejects_what_it_does_not_understand() -> None:
    with pytest.raises(ValueError):
        render_tftpl("%{ if x }a%{ endif }", {"x": True})
    assert render_tftpl("%{ for i, h in hs ~}\n${h.n}=${i + 1}\n%{ endfor ~}\n", {"hs": [{"n": "a"}, {"n": "b"}]}) \
        == "a=1\nb=2\n"


# `terraform apply -var NAME=VALUE ...` -> some all:vars its inventory must carry, and the ports the playbooks
# derive from them (ZooKeeper's clients', the brokers' clients')
MOVED_PORTS = {**variable_default("ports"), "zookeeper_tls": 2282, "broker_tls": 9094}
TERRAFORM_SETTINGS: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[int, int]]] = {
    "zookeeper_tls=false": ({"zookeeper_tls": False}, {"ferry_security": "sasl_ssl", "ferry_zookeeper_tls": False},
                            (2181, 9093)),
    "security=plaintext": ({"security": "plaintext"}, {"ferry_security": "plaintext", "ferry_zookeeper_tls": False},
                           (2181, 9092)),
    # spark_master_webui_port: group_vars/offline.yml sets it too (a group's group_vars, not all.yml)
    "ports": ({"ports": MOVED_PORTS, "spark_ports": {**variable_default("spark_ports"), "master_ui": 8092}},
              {"ferry_zookeeper_tls_port": 2282, "ferry_broker_tls_port": 9094, "ferry_zookeeper_port": 2181,
               "spark_master_webui_port": 8092}, (2282, 9094)),
    "defaults": ({}, {"ferry_security": "sasl_ssl", "ferry_zookeeper_tls": True, "spark_master_webui_port": 8090,
                      "loader_airflow_api_port": 8080}, (2281, 9093)),
}


def assert_the_playbooks_see(inv: Path, passed: dict[str, Any], client_ports: tuple[int, int]) -> None:
    """The inventory carries `passed` in all:vars, Ansible resolves each of its all:vars to the inventory's value on
    every kind of host (the playbooks' group_vars set the same names: the inventory must win), and the ZooKeeper
    and broker ports clients use follow from them."""
    all_vars = yaml.safe_load(inv.read_text())["all"]["vars"]
    assert {k: all_vars.get(k) for k in passed} == passed
    derived = dict(zip(("ferry_zookeeper_client_port", "ferry_broker_client_port"), client_ports, strict=True))
    seen = ansible_sees(inv, "live-zk-1:live-broker-2:offline-broker-1:offline-loader-1",
                        "{" + ", ".join(f"'{n}': {n}" for n in [*all_vars, *derived]) + "}")
    assert set(seen) == {"live-zk-1", "live-broker-2", "offline-broker-1", "offline-loader-1"}, seen
    for host, values in seen.items():
        assert {n: values[n] for n in all_vars} == all_vars, f"{host}: the playbooks override Terraform's settings"
        assert {n: int(values[n]) for n in derived} == derived, host
    connect = ansible_sees(inv, "offline-loader-1", "ferry_live_zookeeper_connect | trim")["offline-loader-1"]
    port = client_ports[0]
    assert connect == f"10.10.1.11:{port},10.10.1.12:{port},10.10.1.13:{port}/ferry/live"


@pytest.fixture(scope="module")
def terraform(tmp_path_factory: pytest.TempPathFactory) -> TerraformCopy:
    return TerraformCopy(tmp_path_factory.mktemp("terraform") / "tf", known_hosts=True)


@pytest.mark.slow
@pytest.mark.parametrize("setting", TERRAFORM_SETTINGS)
def test_terraform_settings_reach_the_playbooks(terraform: TerraformCopy, tmp_path: Path, setting: str) -> None:
    """`terraform apply -var zookeeper_tls=false` (or -var security=plaintext, or other ports) must reach the plays:
    the inventory real Terraform renders (its modules' hosts known at plan time, the root's code as it is) carries
    the setting in all:vars, and Ansible resolves it there. Where terraform or the provider is missing: a skip
    saying so, and the test below still checks the template and Ansible's side."""
    variables, passed, client_ports = TERRAFORM_SETTINGS[setting]
    plan = terraform.plan(*(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in variables.items()))
    inv = tmp_path / "hosts.yml"
    inv.write_text(plan["planned_values"]["outputs"]["ansible_inventory"]["value"])
    assert_the_playbooks_see(inv, passed, client_ports)


@pytest.mark.slow
@pytest.mark.parametrize("setting", TERRAFORM_SETTINGS)
def test_the_templates_settings_are_what_the_playbooks_see(tmp_path: Path, setting: str) -> None:
    """The same through this module's renderer of the template (no terraform binary needed)."""
    variables, passed, client_ports = TERRAFORM_SETTINGS[setting]
    assert_the_playbooks_see(render_inventory(tmp_path, **variables), passed, client_ports)
