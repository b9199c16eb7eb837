"""deploy/check.sh: every file in deploy/ passes the tools operators check it with (hadolint,
kubernetes-validate, check-jsonschema with the Compose schema, promtool, systemd-analyze). And the
bootstrap files shipped in deploy/ seed a data directory and load to runtime as they are."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from gateway.startup import prepare

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
TOOLS = ("hadolint", "kubernetes-validate", "check-jsonschema", "promtool", "systemd-analyze")


def _path_with_venv() -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def test_check_script_passes_every_validator():
    path = _path_with_venv()
    missing = [tool for tool in TOOLS if shutil.which(tool, path=path) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"validators missing under CI: {missing} (pip install -e '.[test]'; apt-get install prometheus systemd)")
        pytest.skip(f"validators not installed: {missing}")
    done = subprocess.run(
        ["bash", str(DEPLOY / "check.sh")],
        env={**os.environ, "PATH": path, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "all checks passed" in done.stdout
    exposure = re.search(r"Overall exposure level for mcp-gateway.service: ([0-9.]+)", done.stdout)
    assert exposure and float(exposure.group(1)) <= 2.0, done.stdout[-500:]


def _bootstrap_files() -> dict[str, str]:
    configmap = yaml.safe_load((DEPLOY / "kubernetes" / "configmap.yaml").read_text())
    return {
        "deploy/gateway.toml": (DEPLOY / "gateway.toml").read_text(),
        "deploy/compose/gateway.toml": (DEPLOY / "compose" / "gateway.toml").read_text(),
        "deploy/kubernetes/configmap.yaml": configmap["data"]["gateway.toml"],
    }


@pytest.mark.parametrize("name", sorted(_bootstrap_files()))
def test_shipped_bootstrap_files_load_to_runtime(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    text = _bootstrap_files()[name]
    config = tmp_path / "gateway.toml"
    config.write_text(text)
    for reference in re.findall(r'"env:([A-Z_]+)"', text):  # passwords come from the environment
        monkeypatch.setenv(reference, "secret-from-the-environment")
    prepared = prepare(tmp_path / "data", config_file=config, environ=os.environ)
    runtime = prepared.store.read_runtime()
    expected = tomllib.loads(text)
    for table in ("mcp_target_profiles", "rag_sources"):
        ids = {row.get("target_id") or row.get("name") for row in expected.get(table, [])}
        loaded = {row.get("target_id") or row.get("name") for row in runtime.table(f"runtime_{table}")}
        assert ids <= loaded, (table, ids, loaded)


def test_the_image_gets_every_package_pyproject_installs():
    """deploy/Dockerfile copies each package (and .dockerignore lets it through): a package added
    to pyproject.toml but not to the image fails the build only where an engine runs."""
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for package in (pattern.rstrip("*") for pattern in packages):
        assert f"COPY {package} ./{package}" in dockerfile, package
        assert f"!{package}/" in ignore, package


def test_example_secrets_are_valid_values_of_their_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The compose .env example and the Kubernetes Secret example start a gateway as they are
    (a token shorter than 16 characters would stop it)."""
    env_file = dict(
        line.split("=", 1)
        for line in (DEPLOY / "compose" / "example.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    gateway_env = compose["services"]["gateway"]["environment"]
    secret = yaml.safe_load((DEPLOY / "kubernetes" / "secret.example.yaml").read_text())["stringData"]
    for name, value in gateway_env.items():  # ${VAR:?message} -> the example's value
        reference = re.fullmatch(r"\$\{(\w+)(:\?[^}]*)?\}", value)
        monkeypatch.setenv(name, env_file[reference.group(1)] if reference else value)
    prepare(tmp_path / "compose", config_file=DEPLOY / "compose" / "gateway.toml", environ=os.environ)
    for name, value in secret.items():
        monkeypatch.setenv(name, value)
    prepare(tmp_path / "kubernetes", environ=os.environ)
