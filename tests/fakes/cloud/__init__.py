"""The fake cloud: ``gcloud``/``gcluster`` executables (bin/) and the fake GoogleApis sharing
one state file (fakecloud_state.py), a Cluster Toolkit bundle carrying the fake gcluster, and
the test's handle on what they recorded."""

from tests.fakes.cloud.apis import FakeGoogleApis
from tests.fakes.cloud.handle import BIN, BLUEPRINT_FIXTURE, Cloud, build_bundle, fake_path

__all__ = ["BIN", "BLUEPRINT_FIXTURE", "Cloud", "FakeGoogleApis", "build_bundle", "fake_path"]
