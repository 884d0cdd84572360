"""The model stays warm while memory is plentiful, goes under pressure (a real daemon, the real
model): the first hybrid search after an idle spell does not pay for a reload, and once memory
is short the model is let go and searches say they are lexical and why."""

from __future__ import annotations

import json
import signal

import yaml

from tests.helpers import FAST, init_root, run_cli, wait_for


def _vectors(d) -> dict:
    return d.status()["vectors"]


def test_idle_past_idle_unload_the_model_stays_until_memory_is_short(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"idle_unload_s": 1, "min_free_mb": 0},
                       conversation={"enabled": False})  # fmt: skip
    d = daemons(config)
    wait_for(
        lambda: all(a["index"].get("pending_embeddings") == 0 for a in d.status()["agents"]) and _vectors(d)["loaded"],
        timeout=300,
        what="the template embedded",
    )
    wait_for(lambda: (_vectors(d)["idle_s"] or 0) >= 3, timeout=60, what="three idle seconds (idle_unload_s is 1)")
    vectors = _vectors(d)
    assert vectors["loaded"] is True and vectors["unload"] == "pressure", vectors
    loads = vectors["loads"]
    answer = json.loads(run_cli("search", "memory", "--agent", "main", "--json", config=config).stdout)
    assert answer["vectors"] == "used", answer["vectors"]
    assert _vectors(d)["loads"] == loads, "the search after the idle spell did not reload the model"

    data = yaml.safe_load(config.read_text())
    data["vectors"]["min_free_mb"] = 10**8  # less than this is free: memory pressure, as the gate sees it
    config.write_text(yaml.safe_dump(data))
    d.signal(signal.SIGHUP)
    wait_for(lambda: not _vectors(d)["loaded"], timeout=60, what="the model let go under pressure")
    lexical = json.loads(run_cli("search", "memory", "--agent", "main", "--json", config=config).stdout)
    assert lexical["results"] and "memory gate closed" in lexical["vectors"], lexical["vectors"]
    assert d.stop() == 0
