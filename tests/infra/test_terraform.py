"""Checks of infra/terraform without a terraform binary.

Neither terraform nor tofu can be installed here (not in Debian's archive; the PyPI wrappers download
the binary and `terraform init` would download the AWS provider, neither reachable), so this parses
every .tf file with python-hcl2 and checks what `terraform validate` would catch in our own code:
declared-and-used variables and locals, module inputs and outputs that exist, references to declared
resources, and firewall rules that open nothing to the world; the inventory template gets what it uses
(rendered and read back by Ansible: test_terraform_inventory.py). Where a terraform binary and a local copy of
the AWS provider are on the machine, the configuration is also validated and planned for real (fake
credentials, no API call).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import hcl2
import pytest
from terraform_copy import TerraformCopy

ROOT = Path(__file__).resolve().parents[2]
TF = ROOT / "infra" / "terraform"
ANSIBLE_DIR = ROOT / "infra" / "ansible"
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"
MODULE_DIRS = [TF, TF / "modules" / "datacenter"]


def unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] == '"' else s


def parse_module(path: Path) -> dict[str, list]:
    """All blocks of the .tf files of one module directory, merged by block type."""
    merged: dict[str, list] = {}
    for tf in sorted(path.glob("*.tf")):
        with tf.open() as f:
            doc = hcl2.load(f)
        for kind, blocks in doc.items():
            merged.setdefault(kind, []).extend(blocks)
    return merged


def strings(node: Any) -> list[str]:
    """Every string value (expressions included) below a parsed node."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):  # "__comments__", "__is_block__": parser bookkeeping, not code
        return [s for k, v in node.items() if not k.startswith("__") for s in strings(k) + strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return []


def named(blocks: list[dict]) -> dict[str, dict]:
    """[{'"name"': body}] -> {name: body}"""
    return {unquote(k): v for b in blocks for k, v in b.items() if not k.startswith("__")}


def variables(mod: dict) -> dict[str, dict]:
    return named(mod.get("variable", []))


def outputs(mod: dict) -> dict[str, dict]:
    return named(mod.get("output", []))


def locals_of(mod: dict) -> set[str]:
    return {k for b in mod.get("locals", []) for k in b if not k.startswith("__")}


def resources(mod: dict) -> set[str]:
    return {f"{unquote(t)}.{unquote(n)}" for b in mod.get("resource", []) for t, body in b.items()
            if not t.startswith("__") for n in body if not n.startswith("__")}


def module_calls(mod: dict) -> dict[str, dict]:
    return named(mod.get("module", []))


def refs(mod: dict, pattern: str) -> set[str]:
    found = set()
    for s in strings(mod):
        found.update(re.findall(pattern, s))
    return found


@pytest.fixture(scope="module", params=MODULE_DIRS, ids=lambda p: str(p.relative_to(TF)) or "root")
def module(request) -> tuple[Path, dict]:
    return request.param, parse_module(request.param)


@pytest.mark.slow  # processes and waits: not in the fast tier
def test_every_file_parses() -> None:
    files = [p for d in MODULE_DIRS for p in d.glob("*.tf")]
    assert len(files) >= 8
    for tf in files:
        with tf.open() as f:
            hcl2.load(f)


def test_variables_declared_used_and_documented(module) -> None:
    path, mod = module
    declared = variables(mod)
    used = refs(mod, r"\bvar\.([A-Za-z_][\w-]*)")
    assert used - set(declared) == set(), f"{path}: used but not declared"
    assert set(declared) - used == set(), f"{path}: declared but never used"
    for name, body in declared.items():
        assert body.get("description"), f"{path}: variable {name} has no description"
        assert body.get("type"), f"{path}: variable {name} has no type"


def test_locals_declared_and_used(module) -> None:
    path, mod = module
    declared = locals_of(mod)
    used = refs(mod, r"\blocal\.([A-Za-z_]\w*)")
    assert used <= declared, f"{path}: undeclared locals {used - declared}"
    assert declared <= used, f"{path}: unused locals {declared - used}"


def test_resource_references_exist(module) -> None:
    path, mod = module
    declared = resources(mod)
    code = {kind: blocks for kind, blocks in mod.items() if kind != "moved"}  # moved.tf names former addresses
    used = {f"{t}.{n}" for t, n in refs(code, r"\b(aws_[a-z0-9_]+)\.([A-Za-z_][\w-]*)")}
    assert used <= declared, f"{path}: references to undeclared resources {used - declared}"


@pytest.mark.slow
def test_module_inputs_and_outputs_exist() -> None:
    root = parse_module(TF)
    calls = module_calls(root)
    assert set(calls) == {"live", "offline"}
    for name, call in calls.items():
        src = (TF / unquote(call["source"])).resolve()
        assert src.is_dir(), f"module {name}: no directory {src}"
        child = parse_module(src)
        child_vars = variables(child)
        args = {k for k in call if k not in ("source", "__is_block__", "depends_on", "providers", "count", "for_each")}
        assert args <= set(child_vars), f"module {name}: unknown inputs {args - set(child_vars)}"
        required = {v for v, body in child_vars.items() if "default" not in body}
        assert required <= args, f"module {name}: required inputs missing {required - args}"
    used = refs(root, r"\bmodule\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)")
    assert used, "the root uses no module output"
    for name, out in used:
        assert name in calls, f"module.{name} is not declared"
        child = parse_module((TF / unquote(calls[name]["source"])).resolve())
        assert out in outputs(child), f"module.{name}.{out}: no such output"


def test_firewall_opens_nothing_to_the_world() -> None:
    for d in MODULE_DIRS:
        mod = parse_module(d)
        for block in mod.get("resource", []):
            for rtype, body in block.items():
                rtype = unquote(rtype)
                for rname, spec in body.items():
                    cidr = unquote(str(spec.get("cidr_ipv4", "")))
                    if rtype == "aws_vpc_security_group_ingress_rule":
                        assert cidr != "0.0.0.0/0", f"{rtype}.{rname} opens {spec.get('from_port')} to the world"
                    assert rtype != "aws_security_group_rule", "use the per-rule resources (ingress/egress_rule)"


def live_ingress(root: dict) -> tuple[dict[str, tuple[str, str, str]], str]:
    """local.live_ingress of the root, {key: (offline group, live group, port expression)}, and its text."""
    text = next(v for b in root["locals"] for k, v in b.items() if k == "live_ingress")
    entry = r'(\w+) = \{from = "(\w+)", to = "(\w+)", port = ([\w.]+)'
    return {k: (f, t, p) for k, f, t, p in re.findall(entry, text)}, text


def test_cross_datacenter_rules_are_only_the_mirrors_and_the_loaders() -> None:
    """Across the link: the offline brokers (mirror links) and the offline mirror to the live brokers and the live
    ZooKeeper; the offline loaders (Prometheus, the dashboard, the loads' books), when there are any, to the live
    ZooKeeper, brokers and brokers' metrics. One rule resource serves them all (local.live_ingress). The Kafka port
    that crosses is SASL_SSL's (local.kafka_port: ports.broker_tls unless var.security is plaintext); the
    plaintext port never does."""
    root = parse_module(TF)
    rules = {unquote(n): spec for b in root.get("resource", []) for t, body in b.items()
             if unquote(t) == "aws_vpc_security_group_ingress_rule" for n, spec in body.items()}
    assert set(rules) == {"live_from_offline"}, rules
    rule = rules["live_from_offline"]
    assert rule["for_each"] == "${local.live_ingress}"
    assert rule["security_group_id"] == "${module.live.security_group_ids[each.value.to]}"
    assert rule["referenced_security_group_id"] == "${module.offline.security_group_ids[each.value.from]}"
    assert rule["from_port"] == rule["to_port"] == "${each.value.port}"
    entries, text = live_ingress(root)
    assert entries == {
        "mirror_links_kafka": ("broker", "broker", "local.kafka_port"),
        "mirror_links_zookeeper": ("broker", "zookeeper", "local.zookeeper_port"),
        "mirror_kafka": ("mirror", "broker", "local.kafka_port"),
        "mirror_zookeeper": ("mirror", "zookeeper", "local.zookeeper_port"),
        "loader_kafka": ("loader", "broker", "local.kafka_port"),
        "loader_zookeeper": ("loader", "zookeeper", "local.zookeeper_port"),
        "loader_metrics": ("loader", "broker", "var.ports.broker_metrics"),
    }
    _, only_with_loaders = text.split("var.offline.loader_count > 0 ?")
    assert set(re.findall(r"(\w+) = \{from", only_with_loaders)) == {k for k in entries if k.startswith("loader_")}


def test_moved_blocks_keep_the_rules_of_earlier_releases() -> None:
    """Each address the cross-datacenter rules had before live_from_offline moves to one of its entries, so that
    an apply over an existing deployment keeps its rules instead of replacing them."""
    root = parse_module(TF)
    moves = {unquote(m["from"]): unquote(m["to"]) for m in root.get("moved", [])}
    assert len(moves) == 7, moves
    keys = set(live_ingress(root)[0])
    targets = [re.fullmatch(r'\$\{aws_vpc_security_group_ingress_rule\.live_from_offline\["(\w+)"\]\}', t) for t in
               moves.values()]
    assert all(targets) and sorted(t.group(1) for t in targets) == sorted(keys), moves
    assert not any("live_from_offline[" in f or f.endswith(".live_from_offline}") for f in moves), moves


RULE = "aws_vpc_security_group_ingress_rule"
# The cross-datacenter rules of the earlier release, by their addresses then: (offline group, live group, port)
EARLIER_RULES = {
    f"{RULE}.live_brokers_from_offline_brokers": ("broker", "broker", 9093),
    f"{RULE}.live_zookeeper_from_offline_brokers": ("broker", "zookeeper", 2281),
    f"{RULE}.live_brokers_from_offline_mirror": ("mirror", "broker", 9093),
    f"{RULE}.live_zookeeper_from_offline_mirror": ("mirror", "zookeeper", 2281),
    f'{RULE}.live_from_offline_loader["broker"]': ("loader", "broker", 9093),
    f'{RULE}.live_from_offline_loader["zookeeper"]': ("loader", "zookeeper", 2281),
    f'{RULE}.live_from_offline_loader["broker_metrics"]': ("loader", "broker", 9308),
}


@pytest.mark.slow
def test_an_existing_deployments_rules_are_moved_not_replaced(tmp_path: Path) -> None:
    """A state of the earlier release (the cross-datacenter rules one resource each, the loaders' a for_each)
    plans as each rule moved to the live_from_offline entry that opens the same port between the same groups,
    with nothing to do: an apply keeps the rules instead of deleting and re-creating them."""
    terraform = TerraformCopy(tmp_path / "tf", known_hosts=True)  # security groups "sg-<dc>-<group>"
    fresh = {r["address"]: r["change"]["after"] for r in terraform.plan()["resource_changes"]
             if r["address"].startswith(f"{RULE}.live_from_offline[")}
    now = {(v["referenced_security_group_id"], v["security_group_id"], v["from_port"]): a for a, v in fresh.items()}
    resources: dict[str, dict] = {}
    expected = {}
    for i, (old, (source, target, port)) in enumerate(EARLIER_RULES.items()):
        address = now[(f"sg-offline-{source}", f"sg-live-{target}", port)]
        expected[address] = (old, ["no-op"])
        name, key = re.fullmatch(rf'{RULE}\.(\w+)(?:\["(\w+)"\])?', old).groups()
        rule_id = f"sgr-{i:017x}"
        instance = {"schema_version": 0, "sensitive_attributes": [], "attributes": {
            **fresh[address], "id": rule_id, "security_group_rule_id": rule_id, "tags_all": {},
            "arn": f"arn:aws:ec2:us-east-1:123456789012:security-group-rule/{rule_id}"}}
        resource = resources.setdefault(name, {"mode": "managed", "type": RULE, "name": name, "instances": [],
                                               "provider": 'provider["registry.terraform.io/hashicorp/aws"]'})
        if key is not None:
            resource["each"], instance["index_key"] = "map", key
        resource["instances"].append(instance)
    assert set(expected) == set(fresh), "a rule of this release has no earlier one, or two earlier rules one"
    (terraform.work / "terraform.tfstate").write_text(json.dumps(
        {"version": 4, "terraform_version": "1.5.0", "serial": 1, "lineage": "earlier-release", "outputs": {},
         "resources": list(resources.values())}))
    planned = {r["address"]: (r.get("previous_address"), r["change"]["actions"])
               for r in terraform.plan()["resource_changes"] if r["type"] == RULE and r["address"] in fresh}
    assert planned == expected


def test_kafka_ports_opened_are_the_tls_port_unless_plaintext() -> None:
    """Every rule of the Kafka protocol opens local.kafka_port, and that is ports.broker_tls (SASL_SSL) with the
    default var.security; ports.broker (PLAINTEXT) appears only as the plaintext choice. The brokers reach each
    other (replication over SASL_SSL) in-module."""
    for d in MODULE_DIRS:
        mod = parse_module(d)
        kafka = [v for b in mod.get("locals", []) for k, v in b.items() if k == "kafka_port"]
        assert kafka == ['${var.security == "plaintext" ? var.ports.broker : var.ports.broker_tls}'], (d, kafka)
        assert unquote(variables(mod)["security"]["default"]) == "sasl_ssl"
        text = "\n".join(tf.read_text() for tf in d.glob("*.tf"))
        assert len(re.findall(r"var\.ports\.broker\b(?!_)", text)) == 1, f"{d}: ports.broker used beyond kafka_port"
    module = parse_module(TF / "modules" / "datacenter")
    clients = [v for b in module.get("locals", []) for k, v in b.items() if k == "broker_clients"]
    assert clients and '["broker"]' in clients[0], clients


def test_zookeeper_port_opened_is_the_tls_port_with_zookeeper_tls() -> None:
    """ZooKeeper's clients (in each datacenter and across the link) get local.zookeeper_port: ports.zookeeper_tls
    (2281, secureClientPort) with var.zookeeper_tls on a secured deployment, else 2181; no rule names 2181 but
    through that choice, and the root passes its zookeeper_tls to both datacenters."""
    for d in MODULE_DIRS:
        mod = parse_module(d)
        zk = [v for b in mod.get("locals", []) for k, v in b.items() if k == "zookeeper_port"]
        assert zk == ['${var.zookeeper_tls && var.security != "plaintext" ? var.ports.zookeeper_tls : '
                      'var.ports.zookeeper}'], (d, zk)
        assert "bool" in str(variables(mod)["zookeeper_tls"]["type"]) and variables(mod)["zookeeper_tls"]["default"] is True
        text = "\n".join(tf.read_text() for tf in d.glob("*.tf"))
        assert len(re.findall(r"var\.ports\.zookeeper\b(?!_)", text)) == 1, f"{d}: 2181 opened beyond the choice"
        assert variables(mod)["ports"]["default"]["zookeeper_tls"] == 2281
    root = parse_module(TF)
    passed = {unquote(n): spec.get("zookeeper_tls") for b in root.get("module", []) for n, spec in b.items()}
    assert passed == {"live": "${var.zookeeper_tls}", "offline": "${var.zookeeper_tls}"}, passed


@pytest.mark.slow
def test_terraform_validates_and_plans_the_metrics_rules(tmp_path: Path) -> None:
    """Where terraform and the AWS provider are on the machine: `terraform validate`, then a plan with the
    example variables (fake credentials, no API call) that opens every metrics port to the loaders only."""
    terraform = TerraformCopy(tmp_path / "tf")
    terraform.run("validate", "-no-color")
    plan = terraform.plan()
    rules = [r for r in plan["resource_changes"] if r["type"] == "aws_vpc_security_group_ingress_rule"]
    by_port: dict[int, list[dict]] = {}
    for r in rules:
        by_port.setdefault(r["change"]["after"]["from_port"], []).append(r)
    # 9308 (broker metrics): the offline brokers in-module and the live brokers across the link; 9309 (the
    # standalone mirror's): nothing, as the default deployment copies through mirror links (mirror_count 0)
    assert sorted(r["address"] for r in by_port[9308]) == [
        'aws_vpc_security_group_ingress_rule.live_from_offline["loader_metrics"]',
        'module.offline.aws_vpc_security_group_ingress_rule.metrics_from_loader["broker"]']
    assert 9309 not in by_port
    # across the link: the mirror links (offline brokers), the standalone mirror's group and the loaders reach the
    # live brokers on SASL_SSL's port and the live ZooKeeper on its TLS port, each rule described
    across = {r["index"]: r["change"]["after"] for r in rules if r["address"].startswith(
        "aws_vpc_security_group_ingress_rule.live_from_offline[")}
    assert {k: (a["from_port"], a["to_port"]) for k, a in across.items()} == {
        "mirror_links_kafka": (9093, 9093), "mirror_links_zookeeper": (2281, 2281), "mirror_kafka": (9093, 9093),
        "mirror_zookeeper": (2281, 2281), "loader_kafka": (9093, 9093), "loader_zookeeper": (2281, 2281),
        "loader_metrics": (9308, 9308)}
    assert all(a["description"] and a["ip_protocol"] == "tcp" for a in across.values()), across
    for port in (8500, 9090):  # the dashboard and Prometheus: the operators' networks only
        assert [r["change"]["after"]["cidr_ipv4"] for r in by_port[port]] == ["203.0.113.0/24"]
    assert all(r["change"]["after"].get("cidr_ipv4") != "0.0.0.0/0" for r in rules)


# --- the inventory template (rendered and read by Ansible: test_terraform_inventory.py) ------------

def test_template_call_passes_what_the_template_uses() -> None:
    root = parse_module(TF)
    value = outputs(root)["ansible_inventory"]["value"]
    passed = set(re.findall(r"\b(\w+)\s*=", value))
    tpl = (TF / "templates" / "inventory.yml.tftpl").read_text()
    used = {m.split(".")[0] for m in re.findall(r"\$\{\s*([A-Za-z_][\w.]*)", tpl)}
    used |= set(re.findall(r"%\{\s*for\s+(?:\w+\s*,\s*)?\w+\s+in\s+(\w+)", tpl))
    loop_vars = set(re.findall(r"%\{\s*for\s+(?:(\w+)\s*,\s*)?", tpl)) | set(
        re.findall(r"%\{\s*for\s+(?:\w+\s*,\s*)?(\w+)\s+in", tpl))
    assert used - loop_vars <= passed, f"template uses {used - loop_vars - passed} not passed by templatefile()"
