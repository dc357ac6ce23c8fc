"""A flow run of a Kubernetes-pool deployment, run the way the Kubernetes worker runs it,
minus the cluster: the pod spec is rendered by prefect-kubernetes' own
``KubernetesWorkerJobConfiguration`` (prefect_kubernetes/worker.py: ``from_template_and_values``
on the pool's base job template and the deployment's job variables, then
``prepare_for_flow_run``, which adds PREFECT__FLOW_RUN_ID and the API settings and sets the
container's args to ``prefect flow-run execute``), and its one container is started with
dockerd from the same image reference, args and literal env.

Why this is a fair stand-in for the worker: the worker does exactly this rendering and hands
the manifest to the Kubernetes API; the kubelet then pulls ``image`` and runs ``args`` with
``env``. What is not exercised: the Job/pod objects themselves, the service account, resource
limits and ``valueFrom`` env (the optional HF_TOKEN Secret; absent here, as when the Secret is
missing). The container uses the host's network so 127.0.0.1 is the test's API server.

Run as ``python -m tests.support.kube_pod POOL DEPLOYMENT_ID FLOW_RUN_ID`` with the server's
environment: it prints the container as JSON (image, args, env).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any
from uuid import UUID


async def render_container(pool_name: str, deployment_id: str, flow_run_id: str) -> dict[str, Any]:
    from prefect.client.orchestration import get_client
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    async with get_client() as client:
        pool = await client.read_work_pool(pool_name)
        deployment = await client.read_deployment(UUID(deployment_id))
        flow_run = await client.read_flow_run(UUID(flow_run_id))
        flow = await client.read_flow(flow_run.flow_id)
        values = {**(deployment.job_variables or {}), **(flow_run.job_variables or {})}
        config = await KubernetesWorkerJobConfiguration.from_template_and_values(
            pool.base_job_template, values, client=client)
    config.prepare_for_flow_run(flow_run, deployment, flow, pool, worker_name="tpurl-test")
    container = config.job_manifest["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    pod = config.job_manifest["spec"]["template"]["spec"]
    return {"image": container["image"], "args": container["args"], "env": env,
            "working_dir": container.get("workingDir"),
            "service_account": pod.get("serviceAccountName"),
            "namespace": config.job_manifest["metadata"].get("namespace"),
            "config_namespace": config.namespace}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(render_container(*sys.argv[1:4]))))
