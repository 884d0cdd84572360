"""Runs inside a booted fleet host (tests/system/test_fleet_l4.py, bench/bench_fleet_l4.py): L4 calls as that
host's agents make them, and raw requests to the hub's peer port as a thief holding a host key would.

Run with the checkout's virtualenv python, by its path (the checkout is bound in at the same path):

- ``stream --config C --agent A --marker M --count N [--interval S] [--stop-file F] --out FILE``: adds
  ``"M A add NNNN …"`` one after another through the host's own daemon (as the CLI does: the agent's
  token), each answer appended to FILE as a JSON line and flushed before the next add, so what the
  caller was told survives anything that happens to the driver: ``{"text", "outcome": "written" |
  "queued" | "error", "ids", "write_id", "error"}``.  Stops after N adds or once F exists.
- ``ops --config C``: a JSON list of calls on stdin, each as its agent; their answers (see :func:`ops`).
- ``list --config C --agent A --marker M``: every memory the agent may read holding M (all pages), as JSON.
- ``peer --url U --key-file K``: a JSON list of requests on stdin (``method``, ``path``, ``agent``
  (the X-Memstrata-Agent header, or null), ``body`` (JSON or null), ``key`` (another key than K's, or
  null)); their answers as a JSON list of ``{"status", "body"}`` (the body as text: the caller looks
  for what must not be there).
- ``hubset --url U --key-file K [--marker M]``: the hub's snapshot for the key's host, every page: ``{"seq",
  "epoch", "memories": {id: {"payload", "readers"}}}`` (vectors left out; only payloads holding M).
- ``replica --config C [--marker M]``: the same from this host's replica (``seq``, ``epoch`` and
  ``applied_at`` (wall time) from ``replica/meta.json``, ``root`` its directory), read from a copy of its
  current generation (the daemon holds the store's lock; the replica flushes before it records a seq, so
  the copy holds at least what that seq names).
- ``watchmeta --config C --seconds S [--stop-file F]``: ``[[wall time, seq], ...]`` each time
  ``replica/meta.json``'s seq changed, sampled every 50 ms (the replica's progress without asking the
  daemon), for S seconds or until F exists.
- ``feedtimes --config C``: ``[[seq, at], ...]``, every row of the hub's change feed with the wall time it
  was recorded (daemon/conversation/feed.py), run on the hub: its seq at any moment, after the fact.
- ``lagwrite --config C --agent A --marker M --count N --interval S --url U --key-file K``: N public adds,
  each with the wall time it was answered and its seq in the hub's feed (asked with this host's key).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _client(config_path: str, agent: str):
    """The agent's own client: its token from its workspace (never the administrator's, which root could read)."""
    from daemon.common.config import load_config
    from daemon.common.settings import client_timeout
    from daemon.common.tokens import own_token
    from daemon.common.workspaces import workspace_of
    from daemon.front.daemon_client import DaemonClient

    config = load_config(Path(config_path))
    token, why = own_token(config.paths.state_dir, agent, workspace_of(config, agent))
    if token is None:
        raise SystemExit(f"no token for {agent}: {why}")
    return DaemonClient(config.paths.socket, timeout=max(60.0, client_timeout(config)), token=token)


def ops(args: argparse.Namespace) -> None:
    """Each ``{"agent", "op", "args": [...], "kwargs": {...}}`` on stdin as that agent (``op`` a method of
    DaemonClient: add, get, memory_search, get_all, history, update, delete, restore_memory); the answers
    as ``{"status": 200 | the refusal's status | 0 (no daemon), "answer" | "error", "elapsed_s"}`` (timed
    here, inside the host: what the agent waited, without the test machine's nsenter)."""
    from daemon.front.daemon_client import DaemonRequestError, DaemonUnavailableError

    clients: dict = {}
    answers = []
    for case in json.load(sys.stdin):
        agent = case["agent"]
        client = clients.get(agent) or clients.setdefault(agent, _client(args.config, agent))
        started = time.monotonic()
        try:
            answer = getattr(client, case["op"])(agent, *case.get("args", []), **case.get("kwargs", {}))
            answers.append({"status": 200, "answer": answer})
        except DaemonRequestError as error:
            answers.append({"status": error.status, "error": str(error)})
        except DaemonUnavailableError as error:
            answers.append({"status": 0, "error": str(error)})
        answers[-1]["elapsed_s"] = time.monotonic() - started
    print(json.dumps(answers))


def stream(args: argparse.Namespace) -> None:
    from daemon.front.daemon_client import DaemonRequestError, DaemonUnavailableError

    client = _client(args.config, args.agent)
    with open(args.out, "a", encoding="utf-8") as out:
        for i in range(args.count):
            if args.stop_file and os.path.exists(args.stop_file):
                break
            text = f"{args.marker} {args.agent} add {i:04d}: the crate on rack {i} holds {args.agent}'s spares"
            row: dict = {"text": text, "i": i}
            try:
                answer = client.add(args.agent, text, visibility=args.visibility)
                if answer.get("queued"):
                    row.update(outcome="queued", write_id=answer.get("write_id"))
                else:
                    row.update(outcome="written", ids=[r["id"] for r in answer.get("results", [])])
            except (DaemonRequestError, DaemonUnavailableError, OSError) as error:
                row.update(outcome="error", error=str(error)[:300])
                client = _client(args.config, args.agent)
            out.write(json.dumps(row) + "\n")
            out.flush()
            os.fsync(out.fileno())
            if args.interval:
                time.sleep(args.interval)


def listing(args: argparse.Namespace) -> None:
    client = _client(args.config, args.agent)
    found, cursor = [], None
    while True:
        page = client.get_all(args.agent, limit=500, **({"cursor": cursor} if cursor else {}))
        found += [
            {"id": m["id"], "memory": m["memory"], "agent_id": m.get("agent_id"), "visibility": m.get("visibility")}
            for m in page["results"]
            if args.marker in m["memory"]
        ]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    print(json.dumps(found))


def peer(args: argparse.Namespace) -> None:
    url = urlsplit(args.url)
    own = Path(args.key_file).read_text().strip()
    answers = []
    for case in json.load(sys.stdin):
        key = case.get("key") or own
        headers = {"Accept": "application/json", "Authorization": f"Bearer {key}"}
        if case.get("agent") is not None:
            headers["X-Memstrata-Agent"] = case["agent"]
        payload = None
        if case.get("body") is not None:
            payload = json.dumps(case["body"]).encode()
            headers["Content-Type"] = "application/json"
        connection = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=60)
        try:
            connection.request(case["method"], case["path"], body=payload, headers=headers)
            response = connection.getresponse()
            answers.append({"status": response.status, "body": response.read().decode(errors="replace")})
        except (OSError, http.client.HTTPException, ValueError) as error:  # ValueError: a header http.client refuses
            answers.append({"status": 0, "body": f"not sent: {type(error).__name__}: {error}"})
        finally:
            connection.close()
    print(json.dumps(answers))


def _http_get(url: str, key: str, path: str) -> dict:
    split = urlsplit(url)
    connection = http.client.HTTPConnection(split.hostname or "", split.port or 80, timeout=120)
    try:
        connection.request("GET", path, headers={"Accept": "application/json", "Authorization": f"Bearer {key}"})
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"{path}: {response.status} {body[:300]!r}")
        return json.loads(body)
    finally:
        connection.close()


def hubset(args: argparse.Namespace) -> None:
    from urllib.parse import quote

    key = Path(args.key_file).read_text().strip()
    page = _http_get(args.url, key, "/v1/peer/snapshot?limit=1000")
    seq, epoch, found = page["seq"], page["epoch"], {}
    while True:
        for m in page["memories"]:
            memory = m["memory"]
            if args.marker in json.dumps(memory["payload"]):
                found[m["id"]] = {"payload": memory["payload"], "readers": sorted(memory["readers"])}
        if not page.get("cursor"):
            break
        page = _http_get(args.url, key, f"/v1/peer/snapshot?limit=1000&cursor={quote(page['cursor'])}")
    print(json.dumps({"seq": seq, "epoch": epoch, "memories": found}))


def _meta(config_path: str) -> tuple[Path, dict]:
    from daemon.common.config import load_config
    from daemon.conversation.hub_replica import replica_dir

    root = replica_dir(load_config(Path(config_path)).paths.state_dir)
    try:
        return root, json.loads((root / "meta.json").read_text())
    except (FileNotFoundError, ValueError):
        return root, {}


def replica(args: argparse.Namespace) -> None:
    from daemon.conversation.hub_replica import copied_points

    root, meta = _meta(args.config)
    found: dict = {}
    if meta.get("dir"):
        for memory_id, payload, readers, _ in copied_points(root, meta):
            if args.marker in json.dumps(payload):
                found[memory_id] = {"payload": payload, "readers": sorted(readers)}
    here = {"seq": meta.get("seq"), "epoch": meta.get("epoch"), "applied_at": meta.get("applied_at"), "root": str(root)}
    print(json.dumps({**here, "memories": found}))


def watchmeta(args: argparse.Namespace) -> None:
    seen: list = []
    last = None
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline and not (args.stop_file and os.path.exists(args.stop_file)):
        seq = _meta(args.config)[1].get("seq")
        if seq != last:
            seen.append([time.time(), seq])
            last = seq
        time.sleep(0.05)
    print(json.dumps(seen))


def feedtimes(args: argparse.Namespace) -> None:
    import sqlite3

    from daemon.common.config import load_config
    from daemon.conversation.feed import feed_path

    db = sqlite3.connect(feed_path(load_config(Path(args.config)).paths.state_dir))
    try:
        print(json.dumps(db.execute("SELECT seq, at FROM changes ORDER BY seq").fetchall()))
    finally:
        db.close()


def lagwrite(args: argparse.Namespace) -> None:
    client = _client(args.config, args.agent)
    key = Path(args.key_file).read_text().strip()
    rows = []
    for i in range(args.count):
        after = _http_get(args.url, key, "/v1/peer/feed?after=0&limit=1")["head"]
        text = f"{args.marker} {args.agent} lag {i:03d}: the ferry to the island leaves at {i % 12 + 1}"
        answer = client.add(args.agent, text, visibility="public")
        at = time.time()
        ids = [r["id"] for r in answer.get("results", [])]
        seq = None
        for _ in range(200):  # the write's row in the feed (served once the write has ended)
            page = _http_get(args.url, key, f"/v1/peer/feed?after={after}&limit=1000")
            seq = next((c["seq"] for c in page["changes"] if c["id"] in ids), None)
            if seq is not None or not ids:
                break
            time.sleep(0.05)
        rows.append({"id": ids[0] if ids else None, "acknowledged_at": at, "seq": seq, "queued": answer.get("queued")})
        time.sleep(args.interval)
    print(json.dumps(rows))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stream")
    s.add_argument("--config", required=True)
    s.add_argument("--agent", required=True)
    s.add_argument("--marker", required=True)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--interval", type=float, default=0.0)
    s.add_argument("--visibility", default="private")
    s.add_argument("--stop-file", default=None)
    s.add_argument("--out", required=True)
    s.set_defaults(run=stream)
    o = sub.add_parser("ops")
    o.add_argument("--config", required=True)
    o.set_defaults(run=ops)
    ls = sub.add_parser("list")
    ls.add_argument("--config", required=True)
    ls.add_argument("--agent", required=True)
    ls.add_argument("--marker", required=True)
    ls.set_defaults(run=listing)
    p = sub.add_parser("peer")
    p.add_argument("--url", required=True)
    p.add_argument("--key-file", required=True)
    p.set_defaults(run=peer)
    h = sub.add_parser("hubset")
    h.add_argument("--url", required=True)
    h.add_argument("--key-file", required=True)
    h.add_argument("--marker", default="")
    h.set_defaults(run=hubset)
    r = sub.add_parser("replica")
    r.add_argument("--config", required=True)
    r.add_argument("--marker", default="")
    r.set_defaults(run=replica)
    w = sub.add_parser("watchmeta")
    w.add_argument("--config", required=True)
    w.add_argument("--seconds", type=float, required=True)
    w.add_argument("--stop-file", default=None)
    w.set_defaults(run=watchmeta)
    ft = sub.add_parser("feedtimes")
    ft.add_argument("--config", required=True)
    ft.set_defaults(run=feedtimes)
    lw = sub.add_parser("lagwrite")
    lw.add_argument("--config", required=True)
    lw.add_argument("--agent", required=True)
    lw.add_argument("--marker", required=True)
    lw.add_argument("--count", type=int, required=True)
    lw.add_argument("--interval", type=float, default=1.0)
    lw.add_argument("--url", required=True)
    lw.add_argument("--key-file", required=True)
    lw.set_defaults(run=lagwrite)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
