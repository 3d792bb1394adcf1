"""The scale-out compose file configures what it claims: every collector service, with the environment
and command compose gives it, resolves through the real config loader to its role on the shared Redis."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from ragtrace_collector.cli import serve
from ragtrace_collector.config import load_config
from ragtrace_collector.processor.sampling.redis_budget import RedisBudget
from ragtrace_collector.processor.sampling.sampler import budget_from_config
from tests.support.compose import interpolate

TOKEN = "compose-token-0123456789abcdef"

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "docker-compose.scale-out.yml"


def test_compose_services_resolve_to_receivers_and_workers_on_one_redis():
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    roles = {}
    for name, svc in services.items():
        if svc.get("image") != "ragtrace-collector:latest":
            continue
        parser = argparse.ArgumentParser()
        serve.add_arguments(parser)
        args = parser.parse_args(svc["command"][1:])
        env = {k: str(v) for k, v in interpolate(svc["environment"], {"RAGTRACE_AUTH__BEARER_TOKEN": TOKEN}).items()}
        cfg = load_config(None, serve.overrides_from_args(args), environ=env)
        roles[name] = (cfg.role, svc.get("deploy", {}).get("replicas", 1))
        if cfg.role == "receiver":  # the spill file lies on a named volume, so a recreated receiver sends it
            mounts = dict(reversed(v.split(":")[:2]) for v in svc["volumes"])
            assert mounts["/etc/ragtrace/collector.yaml"] == "./collector.yaml"
            assert Path(cfg.queue_spill).parent == Path("/var/lib/ragtrace")
            assert mounts["/var/lib/ragtrace"] in spec["volumes"]
        assert cfg.queue.url == "redis://redis:6379/0?receivers=2"
        assert cfg.assembly.shared_state == "redis://redis:6379/0"
        budget = budget_from_config(cfg.sampling, cfg.queue.url)  # built without contacting Redis
        assert isinstance(budget, RedisBudget) and budget.fallback.records_per_minute == 300
        assert cfg.listen.host == "0.0.0.0"
        assert cfg.auth.bearer_token == TOKEN  # beyond loopback: the collector would not start without it
        assert {"receiver-1", "receiver-2", "worker"} <= set(cfg.listen.allowed_hosts)  # Prometheus's names
        assert cfg.sampling.budget.records_per_minute == 600
        assert cfg.sampling.budget.judge_tokens_per_hour == 2_000_000
    for name, svc in services.items():  # published on loopback unless RAGTRACE_PUBLISH_ADDRESS says otherwise
        for port in svc.get("ports", []):
            assert interpolate(str(port), {}).startswith("127.0.0.1:"), (name, port)
    assert roles == {"receiver-1": ("receiver", 1), "receiver-2": ("receiver", 1), "worker": ("worker", 3)}
    assert "--appendonly" in services["redis"]["command"]
    prom = yaml.safe_load(spec["configs"]["prometheus-scale-out"]["content"])
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert jobs["ragtrace-worker"]["dns_sd_configs"][0]["names"] == ["worker"]


def test_inline_prometheus_config_passes_promtool(tmp_path):
    import subprocess

    from tests.support.binaries import require

    promtool = require("promtool", "prometheus")
    content = yaml.safe_load(COMPOSE.read_text())["configs"]["prometheus-scale-out"]["content"]
    rules = COMPOSE.parents[1] / "grafana" / "prometheus" / "rules"
    content = content.replace("/etc/prometheus/rules", str(rules))
    path = tmp_path / "prometheus.yml"
    path.write_text(content)
    done = subprocess.run([promtool, "check", "config", "--syntax-only", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
