"""First start and restarts: bootstrap file, environment overrides, generated tokens, TLS files."""

from __future__ import annotations

import ssl

import pytest

from gateway import tls
from gateway.assembly import endpoints
from gateway.errors import ConfigError
from gateway.startup import env_name, prepare

CONFIG_TOKEN = "config-token-0123456789abcdef"


def _write(path, text):
    path.write_text(text)
    return path


def test_first_start_generates_a_distinct_token_per_endpoint_without_one(tmp_path):
    boot = _write(tmp_path / "gw.toml", f'[variables]\n"mcp-config_endpoint_auth" = "{CONFIG_TOKEN}"\n')
    prepared = prepare(tmp_path / "data", config_file=boot, environ={})
    assert prepared.fresh
    assert set(prepared.generated_tokens) == set(endpoints()) - {"config"}
    assert len(set(prepared.generated_tokens.values())) == len(prepared.generated_tokens)
    assert all(len(t) >= 40 for t in prepared.generated_tokens.values())
    runtime = prepared.store.read_runtime()
    assert runtime.var("mcp-config_endpoint_auth") == (CONFIG_TOKEN,)
    assert runtime.var("mcp-rag_endpoint_auth") == (prepared.generated_tokens["rag"],)
    # a restart keeps the tokens (they were saved to disk) and generates none
    again = prepare(tmp_path / "data", config_file=boot, environ={})
    assert not again.fresh and again.generated_tokens == {}
    assert again.store.read_runtime().var("mcp-rag_endpoint_auth") == (prepared.generated_tokens["rag"],)


def test_bootstrap_file_seeds_disk_only_on_first_start_or_reload(tmp_path):
    boot = _write(tmp_path / "gw.toml", '[variables]\n"mcp-timeout_ms" = 1500\n"mcp-use_ssl" = true\n')
    prepare(tmp_path / "data", config_file=boot, environ={})
    _write(boot, '[variables]\n"mcp-timeout_ms" = 2500\n')
    assert prepare(tmp_path / "data", config_file=boot, environ={}).store.read_runtime().var("mcp-timeout_ms") == 1500
    reloaded = prepare(tmp_path / "data", config_file=boot, reload_config=True, environ={})
    assert reloaded.store.read_runtime().var("mcp-timeout_ms") == 2500


def test_environment_overrides_the_disk_layer(tmp_path):
    environ = {env_name("mcp-timeout_ms"): "999", env_name("mcp-tool_name_style"): "portable"}
    assert env_name("mcp-tool_name_style") == "MCP_GATEWAY_MCP_TOOL_NAME_STYLE"
    runtime = prepare(tmp_path / "data", environ=environ).store.read_runtime()
    assert runtime.var("mcp-timeout_ms") == 999 and runtime.var("mcp-tool_name_style") == "portable"


@pytest.mark.parametrize(
    "text, message",
    [
        ('[variables]\n"mcp-nope" = 1\n', "mcp-nope"),
        ('[variables]\n"mcp-port" = "eighty"\n', "mcp-port"),
        ("[nonsense]\nx = 1\n", "nonsense"),
    ],
)
def test_bad_bootstrap_file_stops_the_start_with_a_clear_error(tmp_path, text, message):
    boot = _write(tmp_path / "gw.toml", text)
    with pytest.raises(ConfigError, match=message):
        prepare(tmp_path / "data", config_file=boot, environ={})


def test_self_signed_certificate_is_generated_once_and_reloads_into_a_live_context(tmp_path):
    cert, key = tls.ensure_self_signed(tmp_path)
    assert (key.stat().st_mode & 0o777) == 0o600
    first = cert.read_bytes()
    assert tls.ensure_self_signed(tmp_path) == (cert, key) and cert.read_bytes() == first
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    tls.ACTIVE_CONTEXTS.append(context)
    try:
        other = tmp_path / "other"
        new_cert, new_key = tls.ensure_self_signed(other)
        assert tls.reload_contexts(new_cert, new_key) >= 1
        with pytest.raises(ValueError):
            tls.resolve_material(tmp_path, str(new_cert), "")
    finally:
        tls.ACTIVE_CONTEXTS.remove(context)
