"""The served name (the model folder's name or the GGUF file's stem, whole; the option over it), a
model given as a Hugging Face id found in the local HF cache (offline), and the front's
/v1/models/{id} for a name with dots and a slash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.unit.test_openai_front import closed_port, decode, encode, render
from tt_backend.config import EngineConfig
from tt_backend.models.checkpoint import (
    DEFAULT_SERVED_NAME,
    hf_cache_dir,
    resolve_model_dir,
    served_model_name,
)
from tt_backend.openai_front.app import FrontConfig, create_app


def test_the_name_is_the_folder_or_the_gguf_stem_whole(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen2.5-0.5B-Instruct"
    folder.mkdir()
    link = tmp_path / "My.Model-1.5"
    link.symlink_to(folder)
    assert served_model_name(str(folder)) == "Qwen2.5-0.5B-Instruct"
    assert served_model_name(f"{folder}/") == "Qwen2.5-0.5B-Instruct"
    assert served_model_name(folder) == "Qwen2.5-0.5B-Instruct"
    assert served_model_name(str(link)) == "My.Model-1.5"  # the link's own name
    gguf = tmp_path / "Llama-3.1-8B-Instruct.Q4_K_M.gguf"
    assert served_model_name(str(gguf)) == "Llama-3.1-8B-Instruct.Q4_K_M"
    assert served_model_name("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert served_model_name("") == DEFAULT_SERVED_NAME == "SmolLM2-135M-Instruct"
    assert served_model_name(str(folder), "chat") == "chat"


def test_served_model_name_is_an_engine_option() -> None:
    config = EngineConfig.from_parameters({"served_model_name": "my.model"})
    assert served_model_name(config.model, config.served_model_name) == "my.model"
    assert served_model_name(EngineConfig().model, EngineConfig().served_model_name) == DEFAULT_SERVED_NAME


def _fake_cache(root: Path, repo: str, revision: str = "0123abcd") -> Path:
    """The hub cache layout: models--org--name/{refs/main, snapshots/<revision>/config.json}."""
    folder = root / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}", encoding="utf-8")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(revision, encoding="utf-8")
    return snapshot


def test_an_hf_id_resolves_from_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = _fake_cache(tmp_path / "hub", "org/My.Model-1.5")
    assert resolve_model_dir("org/My.Model-1.5") == snapshot
    with pytest.raises(ValueError) as missing:
        resolve_model_dir("org/Absent-7B")
    assert str(missing.value) == (
        f"model='org/Absent-7B': no local folder or file of that name, and the Hugging Face id is not in the "
        f"local HF cache {tmp_path / 'hub'} (HF_HUB_CACHE, else HF_HOME/hub; nothing is downloaded: fetch it "
        "first, e.g. `hf download org/Absent-7B`)")
    (snapshot / "config.json").unlink()
    with pytest.raises(ValueError, match=f"the cached snapshot {snapshot} has no config.json"):
        resolve_model_dir("org/My.Model-1.5")


def test_the_cache_folder_follows_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert hf_cache_dir() == tmp_path / "hub"
    snapshot = _fake_cache(tmp_path / "hub", "gpt2")
    assert resolve_model_dir("gpt2") == snapshot
    monkeypatch.delenv("HF_HOME")
    assert hf_cache_dir() == Path(os.path.expanduser("~/.cache/huggingface/hub"))


def test_a_path_that_is_no_model_says_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is neither an HF-format directory, a .gguf file nor a Hugging "
                       "Face id"):
        resolve_model_dir(str(tmp_path / "absent" / "deep" / "x.gguf"))


def test_the_front_serves_a_model_by_its_id() -> None:
    name = "org/My.Model-1.5"
    config = FrontConfig(f"127.0.0.1:{closed_port()}", name, 4096)
    with TestClient(create_app(config, render, decode, encode)) as client:
        assert client.get("/v1/models").json()["data"][0]["id"] == name
        assert client.get(f"/v1/models/{name}").json()["id"] == name
        assert client.get("/v1/models/org/My").status_code == 404
        chat = client.post("/v1/chat/completions", json={"model": "My", "messages": []})
        assert (chat.status_code, chat.json()["error"]["param"]) == (404, "model")
