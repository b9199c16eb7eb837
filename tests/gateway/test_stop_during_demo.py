"""Stopping a first start while the demo corpus is still being indexed (issue 29, item 10): SIGTERM
ends `serve` with exit 0 within the README's 5 s, without a traceback (no "cannot schedule new
futures after interpreter shutdown"), and the next start resumes the demo's sync."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from server_process import REPO_ROOT, free_port


def _start(tmp_path: Path, run: int) -> tuple[subprocess.Popen[bytes], Path]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_RUNTIME_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    port = free_port()
    err = tmp_path / f"stderr-{run}.log"
    with open(err, "wb") as log, open(os.devnull, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"), "--port", str(port), "--host", "127.0.0.1"],
            cwd=tmp_path, env=env, stdout=out, stderr=log, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # serving, and the demo's sync has started (its progress bar)
        assert process.poll() is None, err.read_text(errors="replace")[-3000:]
        if "python_docs:" in err.read_text(errors="replace"):
            try:
                cert = str(tmp_path / "data" / "tls" / "cert.pem")
                if httpx.get(f"https://127.0.0.1:{port}/healthz", verify=cert, timeout=2).status_code == 200:
                    return process, err
            except (httpx.HTTPError, OSError):
                pass
        time.sleep(0.2)
    raise AssertionError("the gateway did not serve with the demo sync running:\n" + err.read_text(errors="replace")[-3000:])


def _terminate(process: subprocess.Popen[bytes]) -> tuple[int, float]:
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)  # the serving process itself, as `kill <pid>` or systemd does
    try:
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return code, time.monotonic() - started


@pytest.mark.slow
def test_sigterm_during_the_first_demo_build_exits_promptly_and_the_next_start_resumes(tmp_path: Path) -> None:
    process, err = _start(tmp_path, 1)
    time.sleep(1.0)  # well inside the build: it takes tens of seconds
    code, took = _terminate(process)
    text = err.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert took < 5.5, f"exit took {took:.1f} s"
    assert "Traceback" not in text and "cannot schedule new futures" not in text, text[-3000:]
    assert not list((tmp_path / "mcp-gateway").glob("*.json")), "the run file is removed"

    process, err = _start(tmp_path, 2)  # the demo's sync runs again: it resumes (its progress bar is back)
    code, _ = _terminate(process)
    assert code == 0 and "python_docs:" in err.read_text(errors="replace")
