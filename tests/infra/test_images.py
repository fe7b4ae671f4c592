"""infra/images/build.sh: images built from our own debootstrapped Debian, reused when nothing changed."""

from __future__ import annotations

import subprocess
import time

import pytest
from ferry_docker_helpers import BUILD_SCRIPT, ROOT, build_images, docker, docker_or_skip

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    docker_or_skip()
    return build_images("ferry", "wheels")


def test_second_build_reuses_everything(images) -> None:
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(BUILD_SCRIPT), "ferry", "wheels"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert "building" not in p.stdout, p.stdout
    assert p.stdout.count("reuse ") == 4, p.stdout  # debian, base, ferry, wheelhouse
    assert took < 60, f"a no-op build took {took:.0f}s"


def test_images_carry_their_content_hash(images) -> None:
    for key in ("FERRY_DEBIAN_IMAGE", "FERRY_BASE_IMAGE", "FERRY_IMAGE"):
        tag = images[key]
        label = docker("image", "inspect", "-f", '{{ index .Config.Labels "org.ferry.content-hash" }}', tag)
        assert tag.endswith(label.stdout.decode().strip()), (tag, label.stdout)


def test_base_image_has_what_the_roles_expect(images) -> None:
    script = ("python3 --version && python3 -c 'import venv, apt' && java -version 2>&1 | head -1 && "
              "test -f /usr/share/java/zookeeper.jar && test -x /sbin/init && "
              "! dpkg -s default-jre >/dev/null 2>&1 && echo OK")
    p = docker("run", "--rm", "--network", "none", images["FERRY_BASE_IMAGE"], "sh", "-c", script)
    out = p.stdout.decode()
    assert out.strip().endswith("OK") and "openjdk" in out, out


def test_ferry_image_runs_ferry(images) -> None:
    p = docker("run", "--rm", "--network", "none", images["FERRY_IMAGE"], "ferry", "broker", "--help")
    assert b"--zookeeper" in p.stdout
    # the same wheel the Ansible roles install
    wheel = next((ROOT / "infra" / "images" / "build" / "wheelhouse").glob("ferry-*.whl"))
    p = docker("run", "--rm", "--network", "none", images["FERRY_IMAGE"], "pip", "show", "ferry")
    assert f"Version: {wheel.name.split('-')[1]}".encode() in p.stdout
