"""A stop request shared by a sweep's jobs (marlgrid.agents.bookkeeping.sweep_stop); the full
joblib trial is tests/test_launchers.py's slow test."""

from __future__ import annotations

import os
import signal

import pytest

from marlgrid.agents.bookkeeping import sweep_stop
from marlgrid.agents.bookkeeping.run_dir import StopRequest


@pytest.fixture(autouse=True)
def no_sweep(monkeypatch):
    monkeypatch.delenv(sweep_stop.ENV, raising=False)


def test_outside_a_sweep_nothing_is_marked_and_marking_does_nothing():
    sweep_stop.mark(signal.SIGTERM)
    assert sweep_stop.marked_signal() is None
    assert not StopRequest().requested


def test_a_signal_to_the_sweep_reaches_every_jobs_stop_request():
    before = signal.getsignal(signal.SIGTERM)
    with sweep_stop.SweepStop() as sweep:
        path = os.environ[sweep_stop.ENV]
        assert not os.path.exists(path)  # nothing marked yet
        job = StopRequest()  # a job's, in this process or a child that inherits the variable
        assert not job.requested
        os.kill(os.getpid(), signal.SIGTERM)  # the sweep's handler marks, nothing dies
        assert sweep_stop.marked_signal() == signal.SIGTERM
        assert job.requested and job.signum == signal.SIGTERM and job.exit_code == 143
        with pytest.raises(KeyboardInterrupt):  # a second signal stops at once
            os.kill(os.getpid(), signal.SIGINT)
    assert sweep.signum == signal.SIGTERM
    assert sweep_stop.ENV not in os.environ and not os.path.exists(path)  # cleaned up
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored


def test_a_job_stopped_by_its_own_signal_stops_the_rest_of_the_sweep():
    with sweep_stop.SweepStop() as sweep:
        sweep_stop.mark(signal.SIGINT)  # what an interrupted job does
        sweep_stop.mark(signal.SIGTERM)  # the first mark stays
        assert StopRequest().requested
    assert sweep.signum == signal.SIGINT


def test_an_unstopped_sweep_reports_no_signal_and_a_nested_one_defers_to_the_outer():
    with sweep_stop.SweepStop() as outer:
        path = os.environ[sweep_stop.ENV]
        with sweep_stop.SweepStop() as inner:
            assert os.environ[sweep_stop.ENV] == path  # the outer sweep's marker serves
        assert inner.signum is None and os.environ[sweep_stop.ENV] == path
    assert outer.signum is None
