"""One real `mlflow server` for every module here that asks for it (a start is about a
minute on a loaded machine): defined once, so its session scope means one server."""

from tests.support.mlflow_server import mlflow_server

__all__ = ["mlflow_server"]
