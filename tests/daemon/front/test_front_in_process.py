"""The front room's in-process tests: the ``memstrata`` commands run through click's CliRunner.

No daemon and no subprocess: each command is invoked in this interpreter on a
root ``memstrata init`` made (tests/daemon/conftest.py copies one per test), so
a failure names the command.  What is checked is what a person or an agent sees:
every command's ``--help`` lists its options, ``--json`` output parses, errors a
person can fix are one line and exit 1 (usage errors exit 2), and with the
daemon down ``status`` surveys the disk and exits 3.  tests/daemon/front/test_cli.py
runs the same commands as real subprocesses.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from daemon.common.tokens import TokenStore
from daemon.front.cli import main
from tests.helpers import git, token_of


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    """Every command under ``group``, groups included, as (its words, the command)."""
    for name, command in sorted(group.commands.items()):
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


COMMANDS = list(_commands(main))


@pytest.fixture(autouse=True)
def _no_caller_environment(monkeypatch):
    """The commands read these from the environment; a test's caller must not choose for it."""
    for name in ("MEMSTRATA_CONFIG", "MEMSTRATA_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def ms(*args: str, config: Path | None = None, input: str | None = None) -> Result:
    """``memstrata [--config CONFIG] ARGS`` in-process."""
    head = ["--config", str(config)] if config else []
    return CliRunner().invoke(main, [*head, *args], prog_name="memstrata", input=input)


def _fine(result: Result) -> Result:
    assert result.exit_code == 0, f"exit {result.exit_code}:\n{result.output}"
    return result


# ---------------------------------------------------------------- help


@pytest.mark.parametrize(("words", "command"), COMMANDS, ids=[" ".join(w) for w, _ in COMMANDS])
def test_the_help_of_each_command_lists_its_options(words, command):
    help_text = _fine(ms(*words, "--help")).output
    assert help_text.startswith(f"Usage: memstrata {' '.join(words)}")
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            for opt in param.opts:
                assert opt in help_text, f"{' '.join(words)}: {opt} not in its --help"
        elif isinstance(param, click.Argument):
            assert param.human_readable_name in help_text.splitlines()[0]


def test_the_top_help_names_every_command_and_the_version_is_said():
    top = _fine(ms("--help")).output
    for name, command in main.commands.items():
        if not command.hidden:
            assert f"  {name}" in top, name
    assert _fine(ms("--version")).output.startswith("memstrata, version ")


# ---------------------------------------------------------------- --json


def test_agent_add_list_and_token_say_what_they_did(service_root):
    root = service_root.parent
    added = _fine(ms("agent", "add", "beta", "--project", "infra", config=service_root)).output
    workspace = root / "workspace" / "agents" / "beta-workspace"
    assert f"created  {workspace}" in added and "token" in added
    listed = json.loads(_fine(ms("agent", "list", "--json", config=service_root)).stdout)
    assert {"id": "beta", "workspace": str(workspace), "projects": ["infra"]} in listed
    assert [row["id"] for row in listed] == ["main", "beta"]

    tokens = TokenStore(root / "state")
    old = token_of(root, "beta")
    assert tokens.identify(old) == "beta"
    _fine(ms("agent", "token", "beta", config=service_root))
    new = token_of(root, "beta")
    assert new != old and tokens.identify(new) == "beta" and tokens.identify(old) is None, "the old one stops"


def test_core_and_history_json_parse(service_root):
    core = json.loads(_fine(ms("core", "--agent", "main", "--json", config=service_root)).stdout)
    names = [s["name"] for s in core["sections"]]
    assert "IDENTITY.md" in names and core["tokens"] > 0 and core["truncated"] is False
    history = json.loads(_fine(ms("history", "--agent", "main", "--json", config=service_root)).stdout)
    assert history and {"sha", "time", "author", "subject"} <= set(history[0])
    assert history[-1]["subject"].startswith("memstrata: start workspace with")


def test_restore_json_says_what_came_back_as_a_new_commit(service_root):
    workspace = service_root.parent / "workspace"
    (workspace / "MEMORY.md").write_text("version one\n")
    git(workspace, "commit", "-qam", "v1")
    (workspace / "MEMORY.md").write_text("version two\n")
    git(workspace, "commit", "-qam", "v2")
    answer = json.loads(
        _fine(ms("restore", "--agent", "main", "MEMORY.md", "--at", "HEAD~1", "--json", config=service_root)).stdout
    )
    assert answer["file"] == "MEMORY.md" and answer["changed"] is True and answer["commit"]
    assert (workspace / "MEMORY.md").read_text() == "version one\n"
    assert git(workspace, "rev-parse", "HEAD").strip() == answer["commit"]


def test_offline_reindex_then_search_json_find_the_note(service_root):
    """With the daemon down, ``reindex`` writes the index itself and ``search`` reads it (full-text only)."""
    (service_root.parent / "workspace" / "MEMORY.md").write_text("# MEMORY\nthe tamarillo crate is in bay 4\n")
    reindexed = json.loads(_fine(ms("reindex", "--json", config=service_root)).stdout)
    assert reindexed["main"]["rebuilt"] is False and reindexed["main"]["files"] > 0
    result = _fine(ms("search", "tamarillo", "--agent", "main", "--json", config=service_root))
    answer = json.loads(result.stdout)
    assert [r["path"] for r in answer["results"]] == ["MEMORY.md"]
    assert answer["vectors"].startswith("unavailable"), "the answer says it is full-text only"


def test_install_dry_run_json_plans_everything_and_writes_nothing(tmp_path):
    config, dest = tmp_path / "etc" / "memstrata.yaml", tmp_path / "sys"
    args = ("install", "--root", str(tmp_path / "openclaw"), "--config", str(config), "--destdir", str(dest))
    result = ms(*args, "--dry-run", "--json")
    assert result.exit_code in (0, 3), result.output  # 3: no systemctl on this machine
    plan = json.loads(result.stdout)
    assert plan["dry_run"] is True and plan["changed"] is False
    targets = {a["target"] for a in plan["actions"]}
    assert str(config) in targets and str(dest / "etc" / "systemd" / "system" / "memstrata.service") in targets
    assert not any(a["done"] for a in plan["actions"])
    assert sorted(tmp_path.iterdir()) == [], "a dry run creates nothing"


# ---------------------------------------------------------------- status with the daemon down


def test_status_without_a_daemon_surveys_the_disk_and_exits_3(service_root):
    root = service_root.parent
    (root / "workspace" / "MEMORY.md").write_text("# MEMORY\nnot yet committed\n")
    result = ms("status", config=service_root)
    assert result.exit_code == 3, result.output
    text = result.output
    said = " ".join(text.split())  # a line over 100 columns goes on, indented, on the next
    assert "daemon NOT running" in said and f"no daemon socket at {root / 'run' / 'memstrata.sock'}" in said
    assert "\nmain  " in text and "(changes waiting to be committed)" in text  # one line per agent
    detail = ms("status", "--agent", "main", config=service_root).output
    assert f"main  {root / 'workspace'}" in detail and "index: missing" in detail

    result = ms("status", "--json", config=service_root)
    assert result.exit_code == 3
    document = json.loads(result.stdout)
    assert document["daemon"]["running"] is False and document["watcher"]["mode"] == "not running"
    (main_agent,) = document["agents"]
    assert main_agent["id"] == "main" and main_agent["pending_commit"] is True and main_agent["files"] > 0
    assert main_agent["index"]["state"].startswith("missing"), "read-only: the survey builds no index"
    assert not (root / "state" / "agents").exists(), "and writes no record"


# ---------------------------------------------------------------- errors a person can fix


def test_a_bad_config_is_one_line_naming_key_and_line_exit_1(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("log:\n  level: loud\n")
    for args in (["status"], ["agent", "list"], ["search", "x", "--agent", "main"]):
        result = ms(*args, config=bad)
        assert result.exit_code == 1, (args, result.output)
        assert "log.level (line 2)" in result.output and "Traceback" not in result.output
        assert isinstance(result.exception, SystemExit), "a message, not an exception"


@pytest.mark.parametrize(
    "args",
    [("note", "--agent", "nobody", "hi"), ("core", "--agent", "nobody"), ("search", "x", "--agent", "nobody")],
    ids=lambda a: a[0],
)
def test_an_unknown_agent_names_the_known_ones_exit_2(service_root, args):
    result = ms(*args, config=service_root)
    assert result.exit_code == 2, result.output  # a usage error (daemon/front/failures.py)
    assert "unknown agent 'nobody'" in result.output and "known agents: main" in result.output


def test_an_invalid_id_is_refused_before_anything_is_made(service_root):
    agents_dir = service_root.parent / "workspace" / "agents"
    before = sorted(agents_dir.iterdir())
    for bad in ("Alpha", "../evil", "a/b"):
        result = ms("agent", "add", "--", bad, config=service_root)
        assert result.exit_code == 2 and "invalid agent id" in result.output, (bad, result.output)
    assert sorted(agents_dir.iterdir()) == before


@pytest.mark.parametrize(
    "args",
    [
        ("cleanup",),  # neither --dry-run nor --execute
        ("cleanup", "--dry-run", "--execute"),
        ("delete", "--agent", "main"),  # neither MEMORY_ID nor --all
        ("agent", "add", "gamma", "--keywords", "k"),  # --keywords without one --project
        ("search", "x", "--agent", "main", "--mode", "fuzzy"),
        ("history", "--agent", "main", "MEMORY.md", "--memory", "abc"),
    ],
    ids=lambda a: " ".join(a),
)
def test_usage_errors_exit_2(service_root, args):
    result = ms(*args, config=service_root)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_an_over_long_query_is_a_usage_error_before_anything_is_opened(service_root):
    result = ms("search", "x" * 4097, "--agent", "main", config=service_root)
    assert result.exit_code == 2 and "4,097" in result.output and "4,096" in result.output
    assert not (service_root.parent / "state" / "memstrata.lock").exists(), "no offline path was taken"


def test_conversation_commands_need_the_daemon_and_say_so(service_root):
    for args in (
        ["add", "remember this", "--agent", "main"],
        ["list", "--agent", "main"],
        ["search", "x", "--agent", "main", "--layer", "conversation"],
    ):
        result = ms(*args, config=service_root)
        assert result.exit_code == 3, (args, result.output)  # the daemon is unreachable
        assert "conversation memory is served by the daemon" in result.output


def test_note_appends_to_todays_file_from_arguments_and_stdin(service_root):
    first = _fine(ms("note", "--agent", "main", "deployed", "Qdrant", config=service_root)).stdout.strip()
    second = _fine(ms("note", "--agent", "main", config=service_root, input="from stdin\n")).stdout.strip()
    assert first == second and Path(first).parent == service_root.parent / "workspace" / "memory"
    lines = Path(first).read_text().splitlines()
    assert lines[-2].endswith(" deployed Qdrant") and lines[-1].endswith(" from stdin")


def test_a_search_that_ranked_only_the_newest_full_matches_says_so(capsys):
    """The answer's ``ranked_newest`` (layers/local/storage/index.py, RANK_NEWEST) is a note on stderr, as relaxed
    is."""
    from daemon.front.local_commands import print_search

    print_search({"results": [], "ranked_newest": 2000, "relaxed": False, "vectors": "used", "lists": []}, False)
    err = capsys.readouterr().err
    assert "(more than 2,000 chunks have every term: the words ranked the newest 2,000 of them)" in err
