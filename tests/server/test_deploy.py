"""deploy/: every Kubernetes manifest checked against the Kubernetes 1.37 schemas offline
(kubernetes-validate, strict: unknown fields fail), the wiring between them, and the Compose
file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from skillfs.auth import TokenConfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def resources() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for p in MANIFESTS for d in docs(p)}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_kubernetes(path: Path) -> None:
    for doc in docs(path):
        kubernetes_validate.validate(doc, "1.37", strict=True)


def test_schema_check_catches_a_bad_field() -> None:
    """The check above can fail: a port that is not a number does."""
    bad = resources()[("Deployment", "skillfs")]
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.37", strict=True)


def test_wiring() -> None:
    r = resources()
    deployment = r[("Deployment", "skillfs")]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["args"][0] == "serve"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["grpc"]["port"] == ports["grpc"]  # store-aware
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"  # process only
    labels = pod["metadata"]["labels"]
    for name in ("skillfs", "skillfs-grpc"):
        assert r[("Service", name)]["spec"]["selector"].items() <= labels.items()
    assert r[("Service", "skillfs-grpc")]["spec"]["clusterIP"] == "None"
    secret = r[("Secret", "skillfs-tokens")]
    assert container["env"][0]["valueFrom"]["secretKeyRef"]["key"] in secret["stringData"]
    mounted = pod["spec"]["volumes"][0]["secret"]
    assert mounted["secretName"] == secret["metadata"]["name"]
    tokens = yaml.safe_load(secret["stringData"][mounted["items"][0]["key"]])
    assert tokens["receipt_key"] and all(t["grants"] for t in tokens["tokens"])
    # the store URL names the three etcd members the StatefulSet creates
    etcd = r[("StatefulSet", "etcd")]
    assert etcd["spec"]["replicas"] == 3 and etcd["spec"]["serviceName"] == "etcd"
    members = [f"etcd-{i}.etcd:2379" for i in range(3)]
    assert secret["stringData"]["store-url"] == "etcd://" + ",".join(members)
    cluster = next(a for a in etcd["spec"]["template"]["spec"]["containers"][0]["command"]
                   if a.startswith("--initial-cluster="))  # fmt: skip
    assert cluster.count("etcd.etcd") == 0 and all(f"etcd-{i}=" in cluster for i in range(3))
    assert r[("StatefulSet", "redis")]["spec"]["template"]["spec"]["containers"][0]["args"][:2] == [
        "--appendonly",
        "yes",
    ]
    # the PostgreSQL option: its user and database are the ones docs/deploy.md's URL names
    pg = r[("StatefulSet", "postgres")]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in pg["env"]}
    assert env["POSTGRES_USER"] == env["POSTGRES_DB"] == "skillfs"
    assert r[("Service", "postgres")]["spec"]["ports"][0]["port"] == 5432


def test_compose_file() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    servers = [s for n, s in services.items() if n.startswith("skillfs-")]
    assert len(servers) == 2
    host_ports = set()
    for s in servers:
        assert (
            s["command"][0] == "serve" and s["environment"]["SKILLFS_STORE"] == "etcd://etcd:2379"
        )
        assert s["depends_on"]["etcd"]["condition"] == "service_healthy"
        source = s["volumes"][0].split(":")[0]
        TokenConfig.parse((DEPLOY / source).read_text())  # the tokens it mounts are valid
        assert (DEPLOY / s["build"]["context"] / s["build"]["dockerfile"]).is_file()
        host_ports |= {p.split(":")[0] for p in s["ports"]}
    assert len(host_ports) == 4  # no two servers on one host port
    assert {"etcd", "redis", "postgres"} <= services.keys() and set(compose["volumes"]) == {
        "etcd-data",
        "redis-data",
        "postgres-data",
    }
