"""daemon/service/reload.py: SIGHUP applies new settings through each part's own method; a bad file changes nothing."""

from __future__ import annotations

import yaml


def _edit(path, **sections) -> None:
    data = yaml.safe_load(path.read_text())
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_new_settings_reach_every_tracker(service):
    d = service.daemon
    kumquat = {"name": "kumquat", "pattern": "kumquat-\\d+"}
    _edit(service.config_path, git={"quiet_period_s": 7.5, "stale_lock_s": 42}, guard={"never_store": [kumquat]})
    d.reload()
    tracker = d.trackers["main"]
    assert tracker.settings.quiet_period_s == 7.5
    assert tracker.repo.stale_lock_s == 42
    assert tracker.guard is d.guard and d.guard.scan_text("kumquat-123"), "the new guard, shared"
    assert d.reloader.config_error == "" and d.reloader.restart_needed == []
    assert d.status()["daemon"]["config_error"] is None


def test_a_bad_file_keeps_the_running_configuration_and_says_why(service):
    d = service.daemon
    running = d.config
    service.config_path.write_text("watch: [\n")
    d.reload()
    assert d.config is running
    assert "reload refused" in d.reloader.config_error
    assert "reload refused" in d.status()["daemon"]["config_error"]


def test_a_path_change_waits_for_a_restart(service, tmp_path):
    d = service.daemon
    _edit(service.config_path, paths={"state_dir": str(tmp_path / "elsewhere")})
    d.reload()
    assert d.reloader.restart_needed == ["paths"]
    assert d.config.paths.state_dir != tmp_path / "elsewhere", "the running paths stay"
    assert d.status()["daemon"]["restart_needed"] == ["paths"]
