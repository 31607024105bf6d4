"""An experiment stage as a Kubernetes Indexed Job (`dualpath experiment NAME --emit k8s`).

Pod i of the Job runs exactly run i of the stage (`dualpath experiment NAME --stage S
--index i`, i = the pod's completion index) and writes its report where the local runner
would, `RESULTS/NAME/runs/KEY.json`, on a PersistentVolumeClaim shared by all pods; a
second, plain Job runs `--collect` on the same volume and writes summary.{json,md,png}.
Pure: file name -> YAML text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dualpath.deploy import yamltext

MOUNT = "/results"
DEFAULT_PVC = "dualpath-experiments"
DEFAULT_IMAGE = "dualpath-testbed:dev"
PVC_SIZE = "1Gi"  # a quick run's report is ~100 KB, a paper-scale one a few MB
# The annotation every Indexed Job pod carries (Kubernetes >= 1.21); read through the
# downward API so that `args` can name it as $(RUN_INDEX).
INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


@dataclass(frozen=True, slots=True)
class Sweep:
    """One stage of one experiment, and how to run it."""

    experiment: str
    quick: bool
    stage: int
    keys: tuple[str, ...]  # run key of each index
    parallelism: int
    pvc: str
    image: str
    resources: dict[str, Any]
    # the pods' command before --stage/--index/--collect; empty: `experiment NAME [--quick]`
    # (`dualpath plan` passes `plan` and its flags: the planner is not a named experiment)
    command: tuple[str, ...] = ()

    @property
    def job_name(self) -> str:
        return f"dualpath-exp-{self.experiment}{'-quick' if self.quick else ''}-s{self.stage}"

    def flags(self) -> list[str]:
        return [self.experiment, *(["--quick"] if self.quick else [])]

    def argv(self) -> list[str]:
        return list(self.command) or ["experiment", *self.flags()]


def _labels(s: Sweep, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "dualpath-testbed",
        "app.kubernetes.io/part-of": "dualpath",
        "app.kubernetes.io/component": component,
        "dualpath/experiment": s.experiment,
    }


def _pod(s: Sweep, name: str, args: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        # fsGroup: the volume is writable by the image's user whatever its owner
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                            "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": name,
            "image": s.image,
            "imagePullPolicy": "IfNotPresent",
            # ENTRYPOINT is `dualpath`; Kubernetes expands $(VAR) from `env` (no shell)
            "args": args,
            "env": [*env, {"name": "RESULTS_DIR", "value": MOUNT},
                    {"name": "MPLCONFIGDIR", "value": "/tmp/matplotlib"}],
            "resources": s.resources,
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "results", "mountPath": MOUNT},
                             {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": s.pvc}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
    }  # fmt: skip


def indexed_job(s: Sweep) -> dict[str, Any]:
    args = [
        *s.argv(), "--stage", str(s.stage), "--index", "$(RUN_INDEX)", "--out", "$(RESULTS_DIR)",
    ]  # fmt: skip
    env = [{"name": "RUN_INDEX", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}}]
    labels = _labels(s, "experiment")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": s.job_name, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": len(s.keys),
            "parallelism": s.parallelism,
            # per index: a pod lost to its node is retried once; a run that fails twice
            # leaves its error file and the other indexes go on (Kubernetes >= 1.29)
            "backoffLimitPerIndex": 1,
            "ttlSecondsAfterFinished": 86400,
            "template": {"metadata": {"labels": labels}, "spec": _pod(s, "run", args, env)},
        },
    }


def collect_job(s: Sweep) -> dict[str, Any]:
    labels = _labels(s, "experiment-collect")
    args = [*s.argv(), "--collect", "--out", "$(RESULTS_DIR)"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{s.job_name}-collect", "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 86400,
            "template": {"metadata": {"labels": labels}, "spec": _pod(s, "collect", args, [])},
        },
    }


def claim(s: Sweep) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": s.pvc, "labels": _labels(s, "experiment-results")},
        # ReadWriteMany: the pods of one Job may run on different machines
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": PVC_SIZE}},
        },
    }


def sweep_files(s: Sweep, command: str) -> dict[str, str]:
    """File name -> YAML text: the Indexed Job of the stage, its collector and the claim."""
    out = f"{s.experiment}/k8s"
    index_lines = [f"  {i}: {k}" for i, k in enumerate(s.keys)]
    job = [
        f"Experiment {s.experiment}{' (quick)' if s.quick else ''}, stage {s.stage}: "
        f"{len(s.keys)} runs as an Indexed Job; pod i runs run i and writes",
        f"{MOUNT}/{s.experiment}/runs/KEY.json on the claim {s.pvc}. Generated by",
        f"  {command}",
        f"kubectl apply -f pvc.yaml -f job-stage{s.stage}.yaml -n NS   (in {out}/)",
        f"kubectl wait --for=condition=complete job/{s.job_name} -n NS --timeout=24h",
        "then the collector: kubectl apply -f collect-job.yaml -n NS. Index -> run:",
        *index_lines,
    ]
    collect = [
        f"Summary of experiment {s.experiment} from the runs on claim {s.pvc}: writes",
        f"{MOUNT}/{s.experiment}/summary.{{json,md}} and its PNGs. Apply once the Indexed "
        "Job(s) completed;",
        "if a later stage is needed it says so (exit 1) with the command that emits it.",
    ]
    claim_text = [
        f"The volume the experiment pods share ({PVC_SIZE}, ReadWriteMany). Skip this file",
        "to use a claim of your own: `--pvc NAME` when emitting.",
    ]
    return {
        f"job-stage{s.stage}.yaml": yamltext.comment(job) + yamltext.dump(indexed_job(s)),
        "collect-job.yaml": yamltext.comment(collect) + yamltext.dump(collect_job(s)),
        "pvc.yaml": yamltext.comment(claim_text) + yamltext.dump(claim(s)),
    }
