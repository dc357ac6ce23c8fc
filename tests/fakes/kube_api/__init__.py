"""The fake Kubernetes API: its state (store), the HTTP server the real client talks to
(server), and the controller/program actions scenarios are written with (scenarios)."""

from tests.fakes.kube_api.server import FakeApiServer
from tests.fakes.kube_api.store import KINDS, ApiError, FakeKube, Obj, Script, condition, now_iso

__all__ = ["KINDS", "ApiError", "FakeApiServer", "FakeKube", "Obj", "Script", "condition",
           "now_iso"]
