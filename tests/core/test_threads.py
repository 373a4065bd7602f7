"""The model is shared between the notebook and the worker thread that runs views' jobs: a job's edits must never
reach a forward the user runs on lab.model meanwhile, while edits bound to the model reach every forward."""

from __future__ import annotations

import threading

import pytest
import torch

import interplab as ilab

CLEAN = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture()
def lab():
    return ilab.Lab.load("ioi-tiny")


def _pause_worker_forwards(lab, worker: list[int], inside: threading.Event, release: threading.Event):
    """A hook of the user's own on the final norm: a forward run by the worker thread waits there (its edit hooks
    still attached below) until released; other threads pass."""
    norm = lab.model.get_submodule(lab.sites.arch.final_norm)

    def pause(module, args):
        if threading.get_ident() in worker:
            inside.set()
            assert release.wait(30)
    return norm.register_forward_pre_hook(pause)


def test_a_jobs_edits_never_reach_the_users_own_forward(lab):
    ids = lab.to_tokens(CLEAN)
    with torch.no_grad():
        plain = lab.model(ids).logits
    worker, inside, release, out = [], threading.Event(), threading.Event(), {}
    handle = _pause_worker_forwards(lab, worker, inside, release)

    def job():
        worker.append(threading.get_ident())
        out["run"] = lab.run(CLEAN, [ilab.zero("resid_post", 1)], log=False).last_logits

    t = threading.Thread(target=job)
    try:
        t.start()
        assert inside.wait(30)
        assert ilab.attached_hooks()  # the job's edit is attached to the shared model right now
        with torch.no_grad():
            during = lab.model(ids).logits  # the user's forward, in the notebook's thread
    finally:
        release.set()
        t.join(30)
        handle.remove()
    torch.testing.assert_close(during, plain, rtol=0, atol=0)
    edited = lab.run(CLEAN, [ilab.zero("resid_post", 1)], log=False).last_logits
    torch.testing.assert_close(out["run"], edited)  # and the job computed its own edit
    assert (edited - plain[:, -1]).abs().max() > 1e-2
    assert not ilab.attached_hooks()


def test_bound_edits_reach_every_threads_forward(lab):
    ids = lab.to_tokens(CLEAN)
    with torch.no_grad():
        plain = lab.model(ids).logits
    got = {}
    lab.bind([ilab.zero("resid_post", 1)])
    try:
        with torch.no_grad():
            here = lab.model(ids).logits

        def elsewhere():
            with torch.no_grad():
                got["logits"] = lab.model(ids).logits
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join(30)
    finally:
        lab.unbind()
    assert (here - plain).abs().max() > 1e-2
    torch.testing.assert_close(got["logits"], here, rtol=0, atol=0)
