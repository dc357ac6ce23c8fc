"""Pre-flight asks whether the Pathways images exist through the same registry HEAD client
as the image stage (image/registry_http.py), against a real registry (dockerd's)."""

from __future__ import annotations

from flows.backends.gke.infra.cloud import RestGoogleApis


class _NoCredentials:
    """A session without Google credentials: the local registry is asked anonymously."""


def test_image_exists_asks_the_registry_through_the_one_head_client(standin_base: str):
    apis = RestGoogleApis(session=_NoCredentials())
    assert apis.image_exists(standin_base) is True
    repository = standin_base.rsplit(":", 1)[0]
    assert apis.image_exists(f"{repository}:no-such-tag") is False
