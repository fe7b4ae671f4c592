"""Terraform's templatefile() in Python, for the subset infra/terraform/templates/inventory.yml.tftpl uses, so
that the inventory Terraform renders can be read back by Ansible here without a terraform binary or an AWS
account (the template's hosts come from instances that only an apply creates); and what outputs.tf gives the
template, from the root's variables."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hcl2

TF = Path(__file__).resolve().parents[2] / "infra" / "terraform"


class _Obj:
    """Attribute access over parsed values, as Terraform's object/list syntax reads them."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __getattr__(self, name: str) -> Any:
        return _wrap(self.value[name])

    def __getitem__(self, key: Any) -> Any:
        return _wrap(self.value[key])


def _wrap(v: Any) -> Any:
    return _Obj(v) if isinstance(v, (dict, list)) else v


_EXPR = re.compile(r'^[\w\s.+\-*\[\]"]+$')


def _eval(expr: str, scope: dict[str, Any]) -> Any:
    if not _EXPR.match(expr):
        raise ValueError(f"template expression outside the supported subset: {expr!r}")
    return eval(expr, {"__builtins__": {}}, {k: _wrap(v) for k, v in scope.items()})  # noqa: S307 - own file


_TOKEN = re.compile(r"(%\{~?\s*(.*?)\s*~?\}|\$\{\s*(.*?)\s*\})", re.S)


def render_tftpl(text: str, scope: dict[str, Any]) -> str:
    """Terraform's templatefile() for the subset the inventory template uses:
    ${expr} (names, .attr, [i], + - *), %{ for [i,] x in expr } ... %{ endfor } and ~ strip markers."""
    # Apply strip markers first: "~}" eats the whitespace after, "%{~" the whitespace before.
    text = re.sub(r"~\}[ \t]*\n?", "}", text)
    text = re.sub(r"[ \t]*%\{~", "%{", text)
    pos = 0
    out: list[Any] = []
    stack: list[list] = [out]
    for m in _TOKEN.finditer(text):
        stack[-1].append(text[pos:m.start()])
        pos = m.end()
        directive, expr = m.group(2), m.group(3)
        if directive is None:
            stack[-1].append(("expr", expr))
        elif directive.startswith("for "):
            fm = re.match(r"for\s+(?:(\w+)\s*,\s*)?(\w+)\s+in\s+(.+)$", directive)
            if not fm:
                raise ValueError(f"unsupported directive {directive!r}")
            node = ["for", fm.group(1), fm.group(2), fm.group(3)]
            stack[-1].append(node)
            stack.append(node)
        elif directive == "endfor":
            stack.pop()
        else:
            raise ValueError(f"unsupported directive {directive!r}")
    stack[-1].append(text[pos:])
    assert len(stack) == 1, "unclosed %{ for }"

    def emit(nodes: list, env: dict[str, Any]) -> str:
        parts = []
        for n in nodes:
            if isinstance(n, str):
                parts.append(n)
            elif isinstance(n, tuple):
                parts.append(str(_eval(n[1], env)))
            else:
                _, idx, var, coll = n[:4]
                items = _eval(coll, env)
                items = items.value if isinstance(items, _Obj) else items
                for i, item in enumerate(items):
                    inner = dict(env, **{var: item})
                    if idx:
                        inner[idx] = i
                    parts.append(emit(n[4:], inner))
        return "".join(parts)

    return emit(out, scope)


def sample_hosts(dc: str, base: str, counts: dict[str, int]) -> dict[str, list[dict]]:
    """What module.<dc>.hosts looks like after an apply."""
    short = {"zookeeper": "zk", "broker": "broker", "mirror": "mirror", "loader": "loader", "spark_worker": "spark"}
    subnet = {"zookeeper": 1, "broker": 2, "mirror": 3, "loader": 4, "spark_worker": 5}
    return {role: [{"name": f"{dc}-{short[role]}-{i + 1}", "private_ip": f"{base}.{subnet[role]}.{11 + i}",
                    "id": f"i-{dc}{role}{i}"} for i in range(counts.get(role, 0))] for role in short}


def variable_default(name: str) -> Any:
    """The default of the root's variable `name` (variables.tf), as the template would be given it."""
    with (TF / "variables.tf").open() as f:
        blocks = hcl2.load(f)["variable"]
    return next(body["default"] for b in blocks for k, body in b.items() if k.strip('"') == name)


def inventory_scope(live: dict, offline: dict, **variables: Any) -> dict[str, Any]:
    """What outputs.tf passes the inventory template, for the root's `variables` (defaults where not given)."""
    v = {name: variables.get(name, variable_default(name)) for name in ("ansible_user", "security", "zookeeper_tls",
                                                                        "ports", "spark_ports")}
    return {"ansible_user": v["ansible_user"], "security": v["security"],
            "zookeeper_tls": str(v["zookeeper_tls"] and v["security"] != "plaintext").lower(),
            "ports": v["ports"], "spark_ports": v["spark_ports"], "live": live, "offline": offline}
