"""Deployment manifests generated from scenarios (`dualpath deploy k8s`, docs/deployment.md).

Pure functions that turn a scenario (a preset or a YAML file, plus `--set` overrides) into
the files of a kustomize overlay (`dualpath.deploy.k8s`), size each pod from measurements
(`dualpath.deploy.resources`, measured with `python -m dualpath.deploy.measure`) and write
an experiment's grid as a Kubernetes Indexed Job (`dualpath.deploy.jobs`). Nothing here
talks to a cluster.
"""
