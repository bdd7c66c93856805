"""The start gate agent work waits on (service/catch_up.py): open when the daemon has started
every part and the parts that must catch up have, or after its limit at the latest."""

from __future__ import annotations

import threading

from hermes_fs.service.catch_up import CatchUp


def test_with_nothing_to_catch_up_the_gate_opens_once_the_parts_are_started():
    gate = CatchUp(max_s=60)
    assert not gate.wait(0.01)  # the parts are not all started yet
    gate.all_started()
    assert gate.wait(0)


def test_work_waits_for_every_holder():
    gate = CatchUp(max_s=60)
    gate.hold("sync")
    gate.hold("other")
    gate.all_started()
    started = threading.Event()
    worker = threading.Thread(target=lambda: gate.wait() and started.set())
    worker.start()
    gate.release("sync")
    assert not started.wait(0.2)
    gate.release("other")
    worker.join(5)
    assert started.is_set()


def test_a_holder_that_never_releases_delays_work_by_the_limit_only():
    gate = CatchUp(max_s=0.3)
    gate.hold("sync")  # a remote that never answers
    gate.all_started()
    assert gate.wait(10)
    gate.release("sync")  # released late: nothing changes
    assert gate.open.is_set()


def test_a_release_before_the_daemon_is_started_opens_nothing_early():
    gate = CatchUp(max_s=60)
    gate.hold("sync")
    gate.release("sync")  # the first round was quicker than the rest of the start
    assert not gate.wait(0.01)
    gate.all_started()
    assert gate.wait(0)


def test_stopping_opens_the_gate():
    gate = CatchUp(max_s=60)
    gate.hold("sync")
    gate.all_started()
    gate.give_up()
    assert gate.wait(0)
    gate.hold("late")  # once open, it stays open
    assert gate.wait(0)
