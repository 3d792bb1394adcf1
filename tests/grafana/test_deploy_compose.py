"""deploy/docker-compose.yml, checked statically (docker cannot run here): valid YAML, every mounted
path exists, ports match the collector's defaults and are published on loopback unless told otherwise, the
token reaches the collector (which will not start without one), Prometheus stores exemplars, configs validate,
every provisioned datasource names a service compose runs, and the collector forwards its traces to that Tempo."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from ragtrace_collector.config import CollectorConfig, load_config
from ragtrace_collector.internal.hosts import HostPolicy, host_name
from ragtrace_collector.service.app import CollectorApp
from tests.grafana.test_alert_links import filled
from tests.support.binaries import require
from tests.support.compose import MissingVariable, interpolate

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_services(compose):
    assert {"collector", "prometheus", "alertmanager", "grafana", "tempo"} <= set(compose["services"])


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
    for port in interpolate(compose["services"]["collector"]["ports"], {}):
        address, host, container = str(port).split(":")
        assert host == container
        assert address == "127.0.0.1"  # published on loopback unless RAGTRACE_PUBLISH_ADDRESS says otherwise
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


def test_every_port_published_on_loopback_unless_told(compose):
    """No service publishes on all host interfaces by default; RAGTRACE_PUBLISH_ADDRESS moves them all."""
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert interpolate(str(port), {}).startswith("127.0.0.1:"), (name, port)
            assert interpolate(str(port), {"RAGTRACE_PUBLISH_ADDRESS": "0.0.0.0"}).startswith("0.0.0.0:"), (name, port)


def _collector_config(compose: dict, environ: dict[str, str]) -> CollectorConfig:
    env = interpolate(compose["services"]["collector"]["environment"], environ)
    return load_config(str(DEPLOY / "collector.yaml"), environ=env)


def test_token_reaches_the_collector_and_is_required(compose):
    token = "compose-token-0123456789abcdef"
    config = _collector_config(compose, {"RAGTRACE_AUTH__BEARER_TOKEN": token})
    assert config.auth.bearer_token == token
    assert (
        interpolate(compose["services"]["grafana"]["environment"], {"RAGTRACE_AUTH__BEARER_TOKEN": token})[
            "COLLECTOR_TOKEN"
        ]
        == token
    )
    for unset in ({}, {"RAGTRACE_AUTH__BEARER_TOKEN": ""}):  # compose refuses to start, naming the variable
        with pytest.raises(MissingVariable, match="RAGTRACE_AUTH__BEARER_TOKEN"):
            _collector_config(compose, unset)


def test_collector_without_token_refuses_to_listen_on_all_interfaces():
    """The compose collector config (host 0.0.0.0) without the token: the collector itself refuses to start."""
    config = load_config(str(DEPLOY / "collector.yaml"), environ={})
    assert config.auth.bearer_token is None and not config.auth.allow_unauthenticated
    with pytest.raises(ValueError, match="reachable from other machines and no credential"):
        CollectorApp(config)._check_exposure()


def test_collector_answers_the_names_the_other_containers_use(compose):
    """Prometheus scrapes collector:9464 and Grafana calls COLLECTOR_URL: those names pass the DNS-rebinding check."""
    config = _collector_config(compose, {"RAGTRACE_AUTH__BEARER_TOKEN": "compose-token-0123456789abcdef"})
    policy = HostPolicy(config.listen.host, config.listen.allowed_hosts)
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    urls = [interpolate(compose["services"]["grafana"]["environment"]["COLLECTOR_URL"], {})]
    for name in [host_name(t) for t in targets if t.startswith("collector:")] + [
        host_name(u.split("//")[1]) for u in urls
    ]:
        assert policy.allows(name), name
    assert not policy.allows("attacker.example")


TOKEN = "compose-token-0123456789abcdef"


def _answers_on(compose: dict, name: str) -> set[int]:
    """The ports service ``name`` answers on the compose network: the container side of its ``ports``, and its
    ``expose`` (which publishes nothing)."""
    service = compose["services"][name]
    published = {int(str(p).rsplit(":", 1)[1]) for p in interpolate(service.get("ports", []), {})}
    return published | {int(p) for p in service.get("expose", [])}


def _tempo_config() -> dict:
    return yaml.safe_load((DEPLOY / "tempo.yaml").read_text())


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def test_every_datasource_url_names_a_service_compose_runs(compose):
    """Grafana's server reaches each provisioned datasource at service:port on the compose network."""
    env = interpolate(compose["services"]["grafana"]["environment"], {"RAGTRACE_AUTH__BEARER_TOKEN": TOKEN})
    provisioned = yaml.safe_load((REPO / "grafana/provisioning/datasources/ragtrace.yaml").read_text())
    urls = {}
    for datasource in provisioned["datasources"]:
        url = filled(datasource["url"], env)
        parts, host = urlsplit(url), urlsplit(url).hostname or ""
        assert host in compose["services"], f"{datasource['name']}: {url} names no service of compose"
        assert parts.port in _answers_on(compose, host), f"{datasource['name']}: {url}"
        urls[datasource["type"]] = url
    assert set(urls) == {"prometheus", "tempo", "yesoreyeram-infinity-datasource"}
    assert urls["tempo"] == f"http://tempo:{_tempo_config()['server']['http_listen_port']}"  # its query API
    assert urls["yesoreyeram-infinity-datasource"] == f"http://collector:{CollectorConfig().listen.metrics_port}"
    assert set(compose["services"]["grafana"]["depends_on"]) >= {"prometheus", "tempo"}


def test_tempo_is_pinned_and_reachable_on_the_compose_network_only(compose):
    tempo = compose["services"]["tempo"]
    assert re.fullmatch(r"grafana/tempo:\d+\.\d+\.\d+", tempo["image"]), tempo["image"]
    assert not tempo.get("ports"), "Tempo publishes nothing on the host: Grafana is its UI"
    config = _tempo_config()
    mounts = {v.split(":")[1]: v.split(":")[0] for v in tempo["volumes"]}
    assert mounts[tempo["command"][0].split("=", 1)[1]] == "./tempo.yaml"
    protocols = config["distributor"]["receivers"]["otlp"]["protocols"]
    listening = {config["server"]["http_listen_port"]} | {_port(p["endpoint"]) for p in protocols.values()}
    assert listening == {int(p) for p in tempo["expose"]} == {3200, 4317, 4318}
    for name, protocol in protocols.items():  # not Tempo 2.7's localhost default: the collector is another host
        assert protocol["endpoint"].startswith("0.0.0.0:"), name
    storage = config["storage"]["trace"]
    assert mounts["/var/tempo"] in compose["volumes"]  # the traces outlive the container
    assert storage["wal"]["path"].startswith("/var/tempo/") and storage["local"]["path"].startswith("/var/tempo/")


def test_collector_forwards_its_traces_to_the_tempo_compose_runs(compose):
    """forward.endpoint is Tempo's OTLP receiver of the same protocol: the exemplars' trace ids resolve there."""
    config = _collector_config(compose, {"RAGTRACE_AUTH__BEARER_TOKEN": TOKEN})
    assert config.forward.endpoint and config.forward.protocol == "http/protobuf"
    target = urlsplit(config.forward.endpoint)
    assert (target.scheme, target.hostname) == ("http", "tempo")
    otlp_http = _tempo_config()["distributor"]["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    assert target.port == _port(otlp_http) and target.port in _answers_on(compose, "tempo")
    assert "tempo" in compose["services"]["collector"]["depends_on"]
    other = _collector_config(compose, {"RAGTRACE_AUTH__BEARER_TOKEN": TOKEN, "RAGTRACE_FORWARD__ENDPOINT": "x:1"})
    assert other.forward.endpoint == "x:1"  # your own Tempo instead


def test_scale_out_forwards_only_to_a_service_it_runs():
    """The scale-out file runs no Tempo: its collectors forward nowhere (it shares deploy/collector.yaml)."""
    spec = yaml.safe_load((DEPLOY / "docker-compose.scale-out.yml").read_text())
    assert load_config(str(DEPLOY / "collector.yaml"), environ={}).forward.endpoint is None
    for name, service in spec["services"].items():
        if service.get("image") != "ragtrace-collector:latest":
            continue
        env = interpolate(service["environment"], {"RAGTRACE_AUTH__BEARER_TOKEN": TOKEN})
        endpoint = load_config(str(DEPLOY / "collector.yaml"), environ=env).forward.endpoint
        assert endpoint is None or urlsplit(endpoint).hostname in spec["services"], (name, endpoint)


def test_alert_links_reach_the_collector_and_grafana_compose_publishes(compose):
    """The runbook links' base (Prometheus's EXPLORER_URL) is the collector's published listener, a name its
    DNS-rebinding check answers; the dashboard links' base (GRAFANA_URL) is Grafana's, and its root_url."""
    prom = interpolate(compose["services"]["prometheus"]["environment"], {})
    explorer, grafana = urlsplit(prom["EXPLORER_URL"]), urlsplit(prom["GRAFANA_URL"])
    assert explorer.port in _answers_on(compose, "collector") and explorer.port == CollectorConfig().listen.metrics_port
    assert grafana.port in _answers_on(compose, "grafana")
    config = _collector_config(compose, {"RAGTRACE_AUTH__BEARER_TOKEN": TOKEN})
    assert HostPolicy(config.listen.host, config.listen.allowed_hosts).allows(explorer.hostname or "")
    env = interpolate(compose["services"]["grafana"]["environment"], {"RAGTRACE_AUTH__BEARER_TOKEN": TOKEN})
    assert env["EXPLORER_URL"] == prom["EXPLORER_URL"] and env["GF_SERVER_ROOT_URL"] == prom["GRAFANA_URL"]


def test_alertmanager_gets_its_notification_templates(compose):
    """alertmanager.yml names its templates relative to itself: compose mounts each beside it."""
    config = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    mounts = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["alertmanager"]["volumes"]}
    config_dir = Path(next(t for t, s in mounts.items() if s == "./alertmanager.yml")).parent
    assert config["templates"]
    for template in config["templates"]:
        assert mounts[str(config_dir / template)] == f"./{template}" and (DEPLOY / template).is_file()


def test_image_installs_the_collector_with_what_its_package_data_links_to():
    """The Dockerfile installs both distributions, and copies every file the collector's package links to (the
    rules, the runbooks): a link left dangling in the image ships a collector without them."""
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    installs = [line.split() for line in lines if line.startswith("RUN pip install")]
    assert installs and "./collector" in installs[0] and "." in installs[0]
    copied = [Path(src) for line in lines if line.startswith("COPY ") for src in line.split()[1:-1]]
    links = [p for p in (REPO / "collector" / "ragtrace_collector").rglob("*") if p.is_symlink()]
    assert any(p.name == "runbooks" for p in links)
    for link in links:
        target = link.resolve().relative_to(REPO)
        assert any(target == c or c in target.parents for c in copied), f"{link}: {target} is not copied"


def test_the_build_context_leaves_out_venvs_and_stale_build_trees():
    """The compose build context is the repository root: without these exclusions it would send the virtual
    environments, and a leftover ``collector/build/lib`` (modules since removed) would go into the image's wheel."""
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line and line[0] != "#"}
    assert {"**/build", ".venv", ".git", ".peers", ".phoenix-venv", "test-output"} <= ignored
    copied = [
        line.split()[1:-1] for line in (DEPLOY / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")
    ]
    for sources in copied:  # nothing the image needs is ignored
        assert not any(src.lstrip("./") in ignored for src in sources), sources
