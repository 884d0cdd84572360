"""Writes with mem0's inference (infer=True), live and replayed after an outage.

The LLM is a stand-in: an OpenAI-compatible chat endpoint served by the test
(a real LLM gateway cannot run on these machines). It answers the way mem0's
extraction prompt asks, and records every call, so the test can see that a
queued write is replayed with the same infer choice it was made with.
"""

from __future__ import annotations

import json
import signal

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient
from tests.daemon.conversation.test_conversation_outage import free_port, set_backend
from tests.helpers import FAST, init_root, run_cli, token_of, wait_for, wait_reachable
from tests.stand_in_llm import StandInLLM

EXTRACTED = "用户偏好 Tailscale 组网"


def extracting_llm() -> StandInLLM:
    """The stand-in LLM answering mem0's extraction prompt with one fixed memory, whatever it asks."""
    server = StandInLLM()
    server.answer = lambda prompt: json.dumps({"memory": [{"text": EXTRACTED}]}, ensure_ascii=False)
    return server


@pytest.fixture
def llm():
    server = extracting_llm()
    yield server
    server.close()


def configure(tmp_path, llm: StandInLLM):
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "a", config=config)
    data = yaml.safe_load(config.read_text())
    data.setdefault("conversation", {})["llm"] = {
        "base_url": llm.url,
        "model": "stand-in",
        "api_key_env": "TEST_LLM_KEY",
    }
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config


def test_infer_writes_what_the_llm_extracts(tmp_path, daemons, llm):
    config = configure(tmp_path, llm)
    daemon = daemons(config, env={"TEST_LLM_KEY": "stand-in-key"})
    wait_reachable(daemon)
    with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
        answer = a.add("a", "我们聊了很久网络，他说最喜欢用 Tailscale 把服务器连起来")
        assert answer["infer"] is True and answer["queued"] is False
        assert [r["memory"] for r in answer["results"]] == [EXTRACTED]
        stored = a.get_all("a")["results"]
        assert [m["memory"] for m in stored] == [EXTRACTED] and stored[0]["write_id"] == answer["write_id"]
        plain = a.add("a", "原样保存这一句", infer=False)
        assert plain["results"][0]["memory"] == "原样保存这一句"
    assert len(llm.calls) == 1
    assert llm.calls[0]["path"] == "/v1/chat/completions" and llm.calls[0]["auth"] == "Bearer stand-in-key"
    assert "stand-in-key" not in daemon.log()


def test_a_queued_infer_write_is_replayed_with_infer(tmp_path, daemons, llm):
    config = configure(tmp_path, llm)
    set_backend(config, "remote", f"http://127.0.0.1:{free_port()}")
    daemon = daemons(config, env={"TEST_LLM_KEY": "stand-in-key"})
    with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
        inferred = a.add("a", "他说最喜欢用 Tailscale")
        raw = a.add("a", "这一句不经过 LLM", infer=False)
    assert inferred["queued"] and inferred["infer"] and raw["queued"] and not raw["infer"]
    daemon.signal(signal.SIGKILL)
    daemon.proc.wait(10)
    assert llm.calls == []

    set_backend(config, "embedded")
    daemon = daemons(config, env={"TEST_LLM_KEY": "stand-in-key"})
    wait_for(lambda: daemon.status()["conversation"]["queue"]["depth"] == 0, timeout=90, what="queue drained")
    assert len(llm.calls) == 1  # only the write made with infer went through the LLM
    with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
        stored = {m["memory"]: m["write_id"] for m in a.get_all("a")["results"]}
    assert stored == {EXTRACTED: inferred["write_id"], "这一句不经过 LLM": raw["write_id"]}
