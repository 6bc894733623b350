"""What a job's pods need on a real cluster: secrets, volumes, placement, image and identity.

Used by the Volcano executor (``JobSpec.pod``); rendered into each task's pod template as the
Kubernetes PodSpec fields of the same meaning. Secrets stay in Kubernetes: a manifest names
the Secret and key (``secretKeyRef``), never the value.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from aifab.core.config import StrictConfig

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class SecretEnv(StrictConfig):
    """An environment variable read from a Kubernetes Secret (DB URL, storage credentials)."""

    name: str = Field(..., pattern=_ENV_NAME.pattern, description="Variable, e.g. AIFAB_DB_URL.")
    secret: str = Field(..., pattern=_DNS.pattern, max_length=253, description="Secret name.")
    key: str = Field(..., min_length=1, description="Key inside the Secret.")


class VolumeSpec(StrictConfig):
    """A volume mounted into every replica: exactly one of pvc, host_path, nfs_*, empty_dir."""

    name: str = Field(..., pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    mount_path: str = Field(..., pattern=r"^/", description="Where it appears in the container.")
    read_only: bool = Field(False, description="Mount read-only.")
    pvc: str | None = Field(None, description="A PersistentVolumeClaim's name.")
    host_path: str | None = Field(None, pattern=r"^/", description="A directory on the node.")
    nfs_server: str | None = Field(None, description="NFS server (with nfs_path).")
    nfs_path: str | None = Field(None, pattern=r"^/", description="Exported path on the server.")
    empty_dir: bool = Field(False, description="A scratch directory that lives with the pod.")

    @model_validator(mode="after")
    def _one_source(self) -> VolumeSpec:
        if (self.nfs_server is None) != (self.nfs_path is None):
            raise ValueError("give both nfs_server and nfs_path")
        sources = [self.pvc, self.host_path, self.nfs_server, self.empty_dir or None]
        if sum(s is not None for s in sources) != 1:
            raise ValueError("give exactly one of pvc, host_path, nfs_server+nfs_path, empty_dir")
        return self

    def to_volume(self) -> dict[str, Any]:
        """The Kubernetes ``Volume``."""
        if self.pvc is not None:
            source: dict[str, Any] = {"persistentVolumeClaim": {"claimName": self.pvc}}
        elif self.host_path is not None:
            source = {"hostPath": {"path": self.host_path, "type": "DirectoryOrCreate"}}
        elif self.nfs_server is not None:
            source = {"nfs": {"server": self.nfs_server, "path": self.nfs_path}}
        else:
            source = {"emptyDir": {}}
        return {"name": self.name, **source}

    def to_mount(self) -> dict[str, Any]:
        """The container's ``VolumeMount``."""
        return {"name": self.name, "mountPath": self.mount_path, "readOnly": self.read_only}


class Toleration(StrictConfig):
    """Lets pods run on nodes with a matching taint (GPU pools, spot nodes)."""

    key: str | None = Field(None, description="Taint key (empty with Exists: every taint).")
    operator: Literal["Equal", "Exists"] = Field("Equal", description="Equal or Exists.")
    value: str | None = Field(None, description="Taint value (with Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    @model_validator(mode="after")
    def _value(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists takes no value")
        return self


class PodSpec(StrictConfig):
    """Cluster settings of a job's pods (Volcano executor; other executors ignore them)."""

    image: str | None = Field(None, description="Container image (default: the executor's).")
    env_from_secrets: list[SecretEnv] = Field(
        default_factory=list, description="Variables read from Secrets (AIFAB_DB_URL...)."
    )
    volumes: list[VolumeSpec] = Field(default_factory=list, description="Volumes and mounts.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels.")
    tolerations: list[Toleration] = Field(default_factory=list, description="Taints tolerated.")
    image_pull_secrets: list[str] = Field(
        default_factory=list, description="Secrets for pulling the image from a private registry."
    )
    service_account: str | None = Field(
        None, pattern=_DNS.pattern, description="ServiceAccount the pods run as."
    )

    @model_validator(mode="after")
    def _unique(self) -> PodSpec:
        for what, names in (
            ("volume", [v.name for v in self.volumes]),
            ("mount path", [v.mount_path for v in self.volumes]),
            ("secret variable", [e.name for e in self.env_from_secrets]),
        ):
            if len(set(names)) != len(names):
                raise ValueError(f"{what}s must be unique")
        return self

    def apply(self, pod: dict[str, Any], container: dict[str, Any]) -> None:
        """Add these settings to a rendered pod spec and its container (in place)."""
        if self.image:
            container["image"] = self.image
        secret_names = {e.name for e in self.env_from_secrets}
        env = [e for e in container.get("env", []) if e["name"] not in secret_names]
        for e in self.env_from_secrets:
            env.append(
                {"name": e.name, "valueFrom": {"secretKeyRef": {"name": e.secret, "key": e.key}}}
            )
        container["env"] = env
        if self.volumes:
            container["volumeMounts"] = [v.to_mount() for v in self.volumes]
            pod["volumes"] = [v.to_volume() for v in self.volumes]
        if self.node_selector:
            pod["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            pod["tolerations"] = [t.model_dump(exclude_none=True) for t in self.tolerations]
        if self.image_pull_secrets:
            pod["imagePullSecrets"] = [{"name": n} for n in self.image_pull_secrets]
        if self.service_account:
            pod["serviceAccountName"] = self.service_account
