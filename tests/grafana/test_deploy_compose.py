"""deploy/docker-compose.yml, checked statically (docker cannot run here): valid YAML, every mounted
path exists, ports match the collector's defaults, Prometheus stores exemplars, configs validate."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from ragtrace_collector.config import CollectorConfig, load_config
from tests.support.binaries import require

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_services(compose):
    assert {"collector", "prometheus", "alertmanager", "grafana"} <= set(compose["services"])


def test_every_mounted_path_exists(compose):
    named = set(compose.get("volumes") or {})
    checked = 0
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source in named:
                continue
            assert (DEPLOY / source).exists(), f"{name}: mounted path {source} does not exist"
            checked += 1
        build = service.get("build")
        if build:
            context = DEPLOY / build["context"]
            dockerfile = context / build["dockerfile"]
            assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
            for line in dockerfile.read_text().splitlines():
                if line.startswith("COPY "):
                    for src in line.split()[1:-1]:
                        assert (context / src).exists(), f"Dockerfile COPY source {src} missing"
    assert checked >= 6


def test_ports_match_collector_defaults(compose):
    defaults = CollectorConfig().listen
    wanted = {defaults.grpc_port, defaults.http_port, defaults.metrics_port}
    assert wanted == {4317, 4318, 9464}
    published = set()
    for port in compose["services"]["collector"]["ports"]:
        host, container = str(port).split(":")[-2:]
        assert host == container
        published.add(int(container))
    assert published == wanted
    config = load_config(str(DEPLOY / "collector.yaml"))
    assert (config.listen.grpc_port, config.listen.http_port, config.listen.metrics_port) == (4317, 4318, 9464)
    assert config.listen.host == "0.0.0.0"  # reachable from the other containers
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert f"collector:{defaults.metrics_port}" in targets
    am = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == ["alertmanager:9093"]


def test_prometheus_service_wired_to_rules_and_exemplars(compose):
    prom = compose["services"]["prometheus"]
    assert "--enable-feature=exemplar-storage" in prom["command"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom["volumes"]}
    assert mounts["/etc/prometheus/rules"] == "../grafana/prometheus/rules"
    assert any(
        r.startswith("/etc/prometheus/rules/")
        for r in yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["rule_files"]
    )


def test_grafana_service_wired_to_provisioning(compose):
    grafana = compose["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    assert mounts["/etc/grafana/provisioning"] == "../grafana/provisioning"
    provider = yaml.safe_load((REPO / "grafana/provisioning/dashboards/ragtrace.yaml").read_text())["providers"][0]
    assert mounts[provider["options"]["path"]] == "../grafana/dashboards"
    env = grafana["environment"]
    assert env["PROMETHEUS_URL"] == "http://prometheus:9090"
    datasources = (REPO / "grafana/provisioning/datasources/ragtrace.yaml").read_text()
    for var in re.findall(r"\$\{(\w+)\}", datasources):
        assert var in env, f"datasource provisioning needs {var} in grafana's environment"


def test_compose_prometheus_config_valid():
    promtool = require("promtool", "prometheus")
    r = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_alertmanager_config_valid():
    amtool = require("amtool", "prometheus-alertmanager")
    r = subprocess.run([amtool, "check-config", str(DEPLOY / "alertmanager.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
