"""The three MaxText programs, played by the fake Kubernetes API when their JobSet "runs".

Why derive everything from the submitted JobSet instead of from the test's own Layout: the
real programs only know what the container is given. So the fake reads the coordinator's
command line (``exec python3 -m <module> key=value ...``) and its environment (``HF_TOKEN``
resolved from the Secret the env var references, exactly as the kubelet would) and writes
the outputs the real program writes at the paths those arguments name. A JobSet that carried
a wrong path would make the flow's own GCS verification fail, not this helper.

Scenario actions run inside FakeKube's script thread (tests/fakes/kube_api/store.py), under its
lock; they only touch the fake API's state and the fake-gcs-server bucket.
"""

from __future__ import annotations

import base64
import json
import shlex
import struct
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flows.backends.gke.jobs.pathways import HEAD
from flows.backends.gke.jobs.render import MAIN_JOB
from flows.core.storage import join
from tests.fakes.kube_api import FakeKube
from tests.fakes.kube_api.scenarios import (
    NS,
    Action,
    admit,
    disrupt_and_fail,
    exit_with,
    say,
    start,
    succeed,
)
from tests.support.tfevents import pb_field, tf_event, tf_record

Script = list[tuple[float, Action]]
WORKLOAD_CONTAINER = "workload-container"
TO_MAXTEXT = "maxtext.checkpoint_conversion.to_maxtext"
TRAIN_RL = "maxtext.trainers.post_train.rl.train_rl"

TO_HUGGINGFACE = "maxtext.checkpoint_conversion.to_huggingface"
EVALUATE = "evaluate_rl.py"  # our program, run by path from the ConfigMap the pod mounts


@dataclass(frozen=True)
class Invocation:
    """What the program in the coordinator container was started with: ``module`` is the
    ``-m`` module, or for a program run by path (``python3 /dir/prog.py``) that path;
    ``options`` are the program's own ``--flags`` before a ``--``, ``args`` the MaxText
    ``key=value`` arguments."""

    module: str
    args: dict[str, str]
    env: dict[str, str]
    options: dict[str, str] = field(default_factory=dict)

    def path(self, key: str) -> str:
        """A directory argument as the program uses it (MaxText passes them with a '/')."""
        return self.args[key].rstrip("/")


def _container(jobset: dict[str, Any]) -> dict[str, Any]:
    for rjob in jobset["spec"]["replicatedJobs"]:
        if rjob["name"] in (HEAD, MAIN_JOB):
            for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
                if container["name"] == WORKLOAD_CONTAINER:
                    return dict(container)
    raise AssertionError(f"JobSet {jobset['metadata']['name']} has no coordinator container")


def invocation(kube: FakeKube, name: str) -> Invocation:
    """Parse the container's shell script and resolve its env as the kubelet would."""
    container = _container(kube.get("jobsets", NS, name))
    script = container["command"][-1]
    (line,) = [ln for ln in script.splitlines() if ln.startswith("exec python3 ")]
    words = shlex.split(line)
    by_path = words[2] != "-m"
    module, rest = (words[2], words[3:]) if by_path else (words[3], words[4:])
    options: dict[str, str] = {}
    if by_path and "--" in rest:  # the program's own flags, then the training's arguments
        own, rest = rest[:rest.index("--")], rest[rest.index("--") + 1:]
        for flag, value in zip(own[::2], own[1::2], strict=False):
            options[flag.lstrip("-")] = value
    args = {}
    for word in rest:
        key, _, value = word.lstrip("-").partition("=")
        args[key] = value
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = var["value"]
        elif ref := (var.get("valueFrom") or {}).get("secretKeyRef"):
            secret = kube.get("secrets", NS, ref["name"])
            env[var["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
    return Invocation(module, args, env, options)


def mounted_file(kube: FakeKube, name: str, path: str) -> str | None:
    """The text a container of JobSet ``name`` reads at ``path`` from a ConfigMap volume, as
    the kubelet projects it (one file per key under the mount path), or None if no mounted
    ConfigMap has it. A JobSet whose pod names a ConfigMap that does not exist never starts
    on a real node (the kubelet reports FailedMount): an AssertionError here."""
    jobset = kube.get("jobsets", NS, name)
    container = _container(jobset)
    pod = next(r["template"]["spec"]["template"]["spec"] for r in jobset["spec"]["replicatedJobs"]
               if r["name"] in (HEAD, MAIN_JOB))
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        prefix = mount["mountPath"].rstrip("/") + "/"
        source = volumes[mount["name"]].get("configMap")
        if source is None or not path.startswith(prefix):
            continue
        with kube.cond:
            configmap = kube.objects.get(("configmaps", NS, source["name"]))
        assert configmap is not None, f"ConfigMap {source['name']} is mounted but does not exist"
        return (configmap.get("data") or {}).get(path[len(prefix):])
    return None


def tensorboard_events(losses: dict[int, float]) -> bytes:
    """A TensorBoard event file (TFRecord framing, Event/Summary protos) with one scalar
    per step, laid out as tunix's writer lays it out (file_version record first)."""
    records = [tf_record(pb_field(3, 2, b"brain.Event:2"))]
    for step, loss in sorted(losses.items()):
        simple = pb_field(1, 2, b"actor/train/loss") + pb_field(2, 5, struct.pack("<f", loss))
        reward = pb_field(1, 2, b"rewards/train/mean") + pb_field(2, 5, struct.pack("<f", 1 - loss))
        records += [tf_record(tf_event(step, simple)), tf_record(tf_event(step, reward))]
    return b"".join(records)


def safetensors_file() -> bytes:
    """A valid single-tensor safetensors file (8-byte header length, JSON header, data)."""
    header = json.dumps({"lm_head.weight": {"dtype": "F32", "shape": [2],
                                             "data_offsets": [0, 8]}}).encode()
    return struct.pack("<Q", len(header)) + header + struct.pack("<2f", 0.25, -0.5)


class FakePrograms:
    """Builds scenario scripts whose actions play converter, trainer and exporter."""

    def __init__(self, bucket_client: Any) -> None:
        self.client = bucket_client  # a google.cloud.storage.Client on the fake-gcs-server
        self.invocations: list[Invocation] = []
        # what stands for the reward functions on a served answer (the evaluation's canary)
        self.canary_reward: Callable[[str], float] = lambda text: 1.0 if "4" in text else 0.0

    # --- writing like the programs do -------------------------------------------------------
    def _put(self, uri: str, data: bytes | str) -> None:
        bucket, _, name = uri.removeprefix("gs://").partition("/")
        self.client.bucket(bucket).blob(name).upload_from_string(data)

    def _program(self, module: str, write: Callable[[Invocation], None]) -> Action:
        def act(kube: FakeKube, name: str) -> None:
            call = invocation(kube, name)
            assert call.module == module, (call.module, module)
            self.invocations.append(call)
            write(call)
        act.__name__ = f"write-{module.rsplit('.', 1)[-1]}"
        return act

    def echo_token(self) -> Action:
        """A program that prints its environment (a debug dump): the redaction must hold."""
        def act(kube: FakeKube, name: str) -> None:
            token = invocation(kube, name).env["HF_TOKEN"]
            # a warning: the run's log shows those (flows/core/program_log.py)
            say(f"WARNING: environment: HF_TOKEN={token} HF_HOME=/scratch/huggingface")(
                kube, name)
        act.__name__ = "echo-token"
        return act

    def convert_outputs(self) -> Action:
        def write(call: Invocation) -> None:
            items = join(call.path("base_output_directory"), "0", "items")
            self._put(join(items, "_METADATA"), json.dumps({"tree_metadata": {}}))
            self._put(join(items, "_CHECKPOINT_METADATA"), json.dumps({"item_handlers": {}}))
            self._put(join(items, "d", "0a1b2c"), b"\x00" * 64)
        return self._program(TO_MAXTEXT, write)

    def train_checkpoint(self, step: int) -> Action:
        def write(call: Invocation) -> None:
            run_dir = join(call.path("base_output_directory"), call.args["run_name"])
            params = join(run_dir, "checkpoints", "actor", str(step), "model_params")
            self._put(join(params, "_METADATA"), json.dumps({"step": step}))
            self._put(join(params, "d", "ffee"), b"\x01" * 64)
        return self._program(TRAIN_RL, write)

    def train_events(self, losses: dict[int, float], host: str) -> Action:
        def write(call: Invocation) -> None:
            run_dir = join(call.path("base_output_directory"), call.args["run_name"])
            self._put(join(run_dir, "tensorboard", f"events.out.tfevents.1700000000.{host}"),
                      tensorboard_events(losses))
        return self._program(TRAIN_RL, write)

    def export_outputs(self) -> Action:
        def write(call: Invocation) -> None:
            out = call.path("base_output_directory")
            self._put(join(out, "config.json"), json.dumps(
                {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe"}))
            self._put(join(out, "tokenizer.json"), json.dumps({"version": "1.0", "model": {}}))
            self._put(join(out, "tokenizer_config.json"), json.dumps({"model_max_length": 512}))
            self._put(join(out, "model.safetensors"), safetensors_file())
        return self._program(TO_HUGGINGFACE, write)

    def evaluate_outputs(self, mean_reward: float, correct: int = 2, total: int = 4) -> Action:
        """The evaluation program: found in the mounted ConfigMap (else python3's own error
        and exit 2), reads the checkpoint it is given (a missing one fails as orbax does),
        writes the scores file where ``--out`` says, and exits 0."""
        def act(kube: FakeKube, name: str) -> None:
            call = invocation(kube, name)
            assert call.module.endswith("/" + EVALUATE), call.module
            text = mounted_file(kube, name, call.module)
            if text is None or "def evaluate_checkpoint" not in text:
                say(f"python3: can't open file '{call.module}': [Errno 2] No such file or "
                    "directory")(kube, name)
                exit_with(2)(kube, name)
                return
            checkpoint = call.path("load_parameters_path")
            bucket, _, prefix = checkpoint.removeprefix("gs://").partition("/")
            if not list(self.client.list_blobs(bucket, prefix=prefix + "/", max_results=1)):
                say("Traceback (most recent call last):", "FileNotFoundError: Checkpoint "
                    f"path {checkpoint} does not exist")(kube, name)
                exit_with(1)(kube, name)
                return
            self.invocations.append(call)
            rewards = [mean_reward] * total
            self._put(call.options["out"], json.dumps({
                "checkpoint": checkpoint, "total": total, "correct": float(correct),
                "accuracy_pct": 100.0 * correct / total, "partial_accuracy_pct": 0.0,
                "format_accuracy_pct": 100.0, "format_correct": float(total),
                "mean_reward": mean_reward, "rewards": rewards, "eval_mode": "pass",
                "num_eval_passes": 1, "sampling": call.args.get("eval_sampling_strategy", ""),
                "trained_rows_checked": 8, "overlap": 0,
                "questions": [f"held-out question {i}" for i in range(total)]}))
            if "canary-out" in call.options:
                self._canary(kube, name, call)
            say(f"EVAL-SCORES {{\"mean_reward\": {mean_reward}, \"total\": {total}}}")(kube, name)
            succeed(kube, name)  # here: a program that failed above never exits 0
        act.__name__ = "write-scores"
        return act

    def _canary(self, kube: FakeKube, name: str, call: Invocation) -> None:
        """The program's serving canary: the client shipped in the ConfigMap beside it
        (images/rehearsal/served_completions.py, executed from the mounted text), the key
        from the pod's env as the kubelet resolves it, a request per held-out question to
        the endpoint; each answer's reward ``canary_reward(text)`` stands for MaxText's
        reward functions. Writes ``--canary-out`` as the program does: scores, or why none."""
        folder = call.module.rsplit("/", 1)[0]
        text = mounted_file(kube, name, f"{folder}/served_completions.py")
        assert text is not None and "class ServedCompletions" in text, "client not shipped"
        client_module = types.ModuleType("served_completions")
        sys.modules["served_completions"] = client_module  # dataclasses resolve it by name
        try:
            exec(compile(text, "served_completions.py", "exec"), client_module.__dict__)
        finally:
            sys.modules.pop("served_completions", None)
        o = call.options
        client = client_module.ServedCompletions(
            o["canary-endpoint"], o["canary-model"], float(o["canary-timeout"]),
            call.env.get(client_module.API_KEY_ENV, ""), sleep=lambda s: None)
        prompts = [f"held-out question {i}" for i in range(int(o["canary-prompts"]))]
        try:
            answers = [client.complete(p, max_tokens=16, temperature=0.0)[0] for p in prompts]
        except client_module.CanaryUnreachable as exc:
            self._put(o["canary-out"], json.dumps({"unreachable": str(exc)}))
            return
        rewards = [self.canary_reward(a) for a in answers]
        self._put(o["canary-out"], json.dumps({
            "checkpoint": f"served {o['canary-model']} at {o['canary-endpoint']}",
            "total": len(prompts), "correct": float(sum(r > 0 for r in rewards)),
            "format_correct": float(len(prompts)), "mean_reward": sum(rewards) / len(rewards),
            "rewards": rewards, "overlap": 0, "requests": client.requests,
            "responses": [{"question": p, "response": a, "reward": r}
                          for p, a, r in zip(prompts, answers, rewards, strict=True)][:8]}))

    # --- the scripts, one per JobSet creation ------------------------------------------------
    def convert(self) -> Script:
        return [(0.1, admit), (0.05, start), (0.05, self.echo_token()),
                (0.05, say("Loading HF model Qwen/Qwen3-30B-A3B-Instruct-2507", "converting")),
                (0.05, self.convert_outputs()), (0.05, say("saved checkpoint to 0/items")),
                (0.1, succeed)]

    def train_preempted(self) -> Script:
        """Runs to step 10, saves actor/10, then its host is preempted and the JobSet fails
        (a Kueue eviction would keep the same JobSet: Kueue re-queues it)."""
        return [(0.1, admit), (0.05, start), (0.05, self.echo_token()),
                (0.05, say("Train step 9 training loss: 0.910000 perplexity: 2.48")),
                (0.05, self.train_checkpoint(10)), (0.05, say("Saving checkpoint at step 10")),
                (0.1, disrupt_and_fail)]

    def train_resumed(self) -> Script:
        """The resubmitted JobSet restores actor/10 and finishes at num_batches (50)."""
        return [(0.1, admit), (0.05, start), (0.05, self.echo_token()),
                (0.05, say("Restoring checkpoint from step 10",
                           "Train step 30 training loss: 0.620000 perplexity: 1.86")),
                (0.05, self.train_checkpoint(50)),
                (0.05, self.train_events({10: 0.91, 30: 0.62, 49: 0.41}, "pathways-head-0")),
                (0.05, say("Train step 49 training loss: 0.410000 perplexity: 1.51",
                           "Saving checkpoint at step 50")),
                (0.1, succeed)]

    def export(self) -> Script:
        return [(0.1, admit), (0.05, start), (0.05, self.echo_token()),
                (0.05, self.export_outputs()), (0.05, say("saved HF model")), (0.1, succeed)]

    def evaluate(self, mean_reward: float) -> Script:
        return [(0.1, admit), (0.05, start), (0.05, self.echo_token()),
                (0.05, self.evaluate_outputs(mean_reward))]

    def export_fails(self) -> Script:
        """A user error whose traceback quotes the token: the diagnosis must not."""
        def traceback_with_token(kube: FakeKube, name: str) -> None:
            token = invocation(kube, name).env["HF_TOKEN"]
            say("Traceback (most recent call last):",
                f"huggingface_hub.errors.HfHubHTTPError: 401 for token {token}")(kube, name)
        return [(0.1, admit), (0.05, start), (0.05, traceback_with_token),
                (0.1, exit_with(1))]
