"""The registry's mode (Confluent's /mode): READWRITE, READONLY (refuses registrations and deletes) or IMPORT
(registrations keep the ids and versions they are given, as a migration from another registry needs).

Kept in ZooKeeper next to the compatibility config::

    /schemas/mode              {"mode": MODE}   (the registry's mode; absent: READWRITE)
    /schemas/mode/<subject>    {"mode": MODE}   (a subject's override)
"""

from __future__ import annotations

import json

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry.schemas.errors import OperationNotPermittedError

MODE = "/schemas/mode"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE = "READWRITE"


def normalise_mode(mode: object) -> str:
    value = str(mode).strip().upper() if isinstance(mode, str) else ""
    if value not in MODES:
        raise ValueError(f"Invalid mode. Valid values are: {', '.join(MODES)}")
    return value


class RegistryModes:
    """Read and set the registry's and subjects' modes."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client

    def mode(self, subject: str | None = None) -> str:
        """The mode that applies to ``subject`` (its override, else the registry's, else READWRITE)."""
        if subject is not None:
            override = self.override(subject)
            if override is not None:
                return override
        return self._read(MODE) or DEFAULT_MODE

    def override(self, subject: str) -> str | None:
        return self._read(f"{MODE}/{subject}")

    def set_mode(self, mode: str, subject: str | None, force: bool, has_schemas: bool) -> str:
        """Set the registry's (subject None) or a subject's mode; IMPORT only where nothing is registered yet
        unless ``force``."""
        value = normalise_mode(mode)
        if value == "IMPORT" and has_schemas and not force:
            where = "subject" if subject else "registry"
            raise OperationNotPermittedError(f"Cannot import since found existing subjects in the {where}: "
                                             "set IMPORT with force=true to import over them")
        data = json.dumps({"mode": value}).encode()
        path = MODE if subject is None else f"{MODE}/{subject}"
        try:
            self._client.create(path, data, makepath=True)
        except NodeExistsError:
            self._client.set(path, data)
        return value

    def delete_override(self, subject: str) -> str | None:
        """Remove a subject's override; the mode it had (None: it had none)."""
        previous = self.override(subject)
        if previous is not None:
            try:
                self._client.delete(f"{MODE}/{subject}")
            except NoNodeError:
                pass
        return previous

    def _read(self, path: str) -> str | None:
        try:
            data, _ = self._client.get(path)
        except NoNodeError:
            return None
        try:
            return normalise_mode(json.loads(data)["mode"])
        except (ValueError, KeyError, TypeError):
            return None
