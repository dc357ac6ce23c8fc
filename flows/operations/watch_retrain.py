"""After a regression's rollback: a retrain queued on the newest announced dataset, through
the retrain deployment's dispatcher, where the profile's ``watch.retrain`` names one.

The retrain is announced, never created here: the newest dataset the deployment's runs hold
or trained (its ledger, flows/announcements/decide.py ``held_or_trained``) is posted again
as ``tpurl.dataset.updated`` for the profile, with a new id and ``occurred``, so the
dispatcher's own checks, coalescing and sealed record apply as to any announcement. It runs
after the rollback, so the retrained model is judged against the restored champion.
"""

from __future__ import annotations

from prefect.client.orchestration import SyncPrefectClient
from prefect.exceptions import ObjectNotFound

from flows.announcements.announce import announcement_body
from flows.announcements.decide import held_or_trained
from flows.announcements.dispatch import read_ledger
from flows.config.profile import Profile


def announce_retrain(client: SyncPrefectClient, profile: Profile) -> str:
    """What was done, in a line for the run log (nothing when the profile asks for none)."""
    target = profile.watch.retrain if profile.watch else None
    if not target:
        return ""
    try:
        deployment = client.read_deployment_by_name(target)
    except ObjectNotFound:
        return (f"watch.retrain: deployment {target!r} does not exist, so no retrain was "
                "queued; fix: name the retrain deployment as FLOW/NAME (`prefect deployment "
                "ls`), e.g. rl-post-training/retrain-rehearsal")
    newest = held_or_trained(read_ledger(client, deployment.id)).get("dataset")
    if newest is None:
        return (f"watch.retrain: no dataset was ever announced to {target}, so no retrain was "
                "queued; fix: `tpurl announce PROFILE --dataset URI` queues one")
    body = announcement_body(profile.name, "dataset", newest[0].value)
    client.request("POST", "/events", json=[body]).raise_for_status()
    return (f"retrain: dataset {newest[0].value} announced again to {target}'s dispatcher "
            f"(event {body['id']}), to be judged against the restored champion")
