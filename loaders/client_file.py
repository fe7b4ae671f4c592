"""How the split readers on Spark's executors get the offline cluster's client settings (TLS/SASL) without a
secret in Spark's conf, its UI or a task's closure: the data source carries only where the properties file is.

- local mode (driver and executors on one machine): the file's own path (``ferry.clientConfig``); nothing is
  shipped, so two loads of one session with client files of the same name from different state dirs never
  collide in SparkFiles;
- cluster mode: a private copy named by a digest of its content (``ferry-client-<sha256>.properties``) is
  shipped with ``SparkContext.addFile`` and named in ``ferry.clientConfigShipped``; equal content means equal
  name, so a second ship of the same settings is a no-op and different settings never clash. Certificates
  and keys the file names by path must exist at that path on every worker (docs/loaders.md).
"""

from __future__ import annotations

import hashlib
import weakref
from pathlib import Path

from pyspark.sql import SparkSession

from ferry.wire.client_config import ClientConfig

OPTION_PATH = "ferry.clientConfig"
OPTION_SHIPPED = "ferry.clientConfigShipped"

_shipped: weakref.WeakKeyDictionary[SparkSession, set[str]] = weakref.WeakKeyDictionary()


def is_local(spark: SparkSession) -> bool:
    return spark.sparkContext.master.startswith("local")


def reader_options(spark: SparkSession, client_config: str | None, state_dir: str) -> dict[str, str]:
    """The data source options that tell executors where the client settings are (none for plaintext)."""
    if not client_config:
        return {}
    path = Path(client_config).resolve()
    if is_local(spark):
        return {OPTION_PATH: str(path)}
    config = ClientConfig.from_file(path)  # checked on the driver: a bad file fails before any task
    text = config.to_properties_text()
    name = f"ferry-client-{hashlib.sha256(text.encode()).hexdigest()[:32]}.properties"
    names = _shipped.setdefault(spark, set())
    if name not in names:
        folder = Path(state_dir) / "client-config"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        config.write_private(folder / name)
        spark.sparkContext.addFile(str(folder / name))
        names.add(name)
    return {OPTION_SHIPPED: name}


def executor_client_config(options: dict[str, str]) -> ClientConfig:
    """On an executor (or the driver while planning): the settings the options point at; plaintext if none.
    ``options``' keys are lower-cased, as the reader keeps them."""
    shipped = options.get(OPTION_SHIPPED.lower())
    if shipped:
        from pyspark import SparkFiles  # only in cluster mode, where the file was shipped

        return ClientConfig.from_file(SparkFiles.get(shipped))
    path = options.get(OPTION_PATH.lower())
    return ClientConfig.from_file(path) if path else ClientConfig.plaintext()
