"""Kueue's own configuration (its Configuration object) as the deploy sets it, and whether
it turns fair sharing on. Pure except for reading the shipped values file.

The blueprint installs Kueue's Helm chart with tpurl's values
(deployments/blueprints/kueue-helm-values.yaml, staged by the edit
kueue-chart-with-fair-sharing, decision 0041); the chart writes the value
``managerConfig.controllerManagerConfigYaml`` into ConfigMap
kueue-system/kueue-manager-config (kubernetes-sigs/kueue v0.17.1
charts/kueue/templates/manager/manager-config.yaml), which the controller reads at start.
So what the deploy sets and what ``tpurl plan --check`` reads live are the same text, and
the same function judges both.

Fair sharing is on when the Configuration has a ``fairSharing`` section (kueue v0.17.1
apis/config/v1beta2/configuration_types.go ``Configuration.FairSharing``, whose one field is
``preemptionStrategies``); in config.kueue.x-k8s.io/v1beta1 the section also needed
``enable: true`` (apis/config/v1beta1 ``FairSharing.Enable``).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from flows.common.paths import REPO_ROOT

KUEUE_VALUES = REPO_ROOT / "deployments" / "blueprints" / "kueue-helm-values.yaml"


def fair_sharing_on(config_text: str | None) -> bool | None:
    """Pure: is fair sharing on in Kueue's configuration text? None: not read, or not YAML."""
    if config_text is None:
        return None
    try:
        config = yaml.safe_load(config_text)
    except yaml.YAMLError:
        return None
    if not isinstance(config, dict):
        return None
    section = config.get("fairSharing")
    if not isinstance(section, dict):
        return False
    if str(config.get("apiVersion", "")).endswith("/v1beta1"):
        return section.get("enable") is True
    return section.get("enable", True) is not False


def manager_config_of(values_text: str) -> str | None:
    """Pure: the Configuration text Kueue's chart renders from these values; None when they
    give none (the chart's default then, which has no fairSharing)."""
    values = yaml.safe_load(values_text) or {}
    given = (values.get("managerConfig") or {}).get("controllerManagerConfigYaml") \
        if isinstance(values, dict) else None
    return given if isinstance(given, str) else None


def deployed_manager_config(path: Path = KUEUE_VALUES) -> str | None:
    """The Configuration text the deploy gives Kueue's chart."""
    return manager_config_of(path.read_text())


def deploy_sets_fair_sharing(path: Path = KUEUE_VALUES) -> bool:
    return fair_sharing_on(deployed_manager_config(path)) is True
