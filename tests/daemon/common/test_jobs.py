"""daemon/common/jobs.py: the one mechanism by which a thread hands work to the thread that owns a resource."""

from __future__ import annotations

import threading
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from daemon.common.jobs import Jobs, StoreWorker


def test_loop_jobs_run_in_the_draining_thread_and_hand_back_results_and_errors():
    woken = threading.Event()
    jobs = Jobs(on_submit=woken.set)
    results: dict = {}

    def caller() -> None:
        results["value"] = jobs.call(lambda: threading.current_thread().name, timeout=10)
        try:
            jobs.call(lambda: 1 / 0, timeout=10)
        except ZeroDivisionError as exc:
            results["error"] = exc

    thread = threading.Thread(target=caller, name="api")
    thread.start()
    for _ in range(2):
        assert woken.wait(10), "submitting wakes the owning thread"
        woken.clear()
        while not jobs.run_pending():
            pass
    thread.join(10)
    assert results["value"] == threading.current_thread().name, "the job ran in the owner's thread, not the caller's"
    assert isinstance(results["error"], ZeroDivisionError), "the job's exception reaches its caller"
    assert jobs.run_pending() is False, "nothing is left"


def test_a_job_given_up_before_it_started_never_runs():
    jobs = Jobs()
    ran = []
    future = jobs.submit(lambda: ran.append(1))
    assert future.cancel()
    jobs.run_pending()
    assert ran == []


def test_patient_waits_do_not_count_time_queued_behind_a_job_within_its_own_deadline():
    worker = StoreWorker()
    release = threading.Event()
    try:
        worker.submit(lambda: release.wait(10), deadline=10)  # a long job ahead, within its deadline
        queued = worker.submit(lambda: "done", deadline=0.2)
        impatient = worker.submit(lambda: "late", deadline=0.2)
        with pytest.raises(FutureTimeout):
            worker.wait(impatient, 0.2, patient=False)  # an agent's request: counted from now
        threading.Timer(0.6, release.set).start()
        assert worker.wait(queued, 0.2, patient=True) == "done", "0.6 s queued, yet within its own 0.2 s"
    finally:
        release.set()
        worker.stop(5)
    assert not worker.alive
