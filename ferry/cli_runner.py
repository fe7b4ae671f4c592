"""How every `ferry` command fails: the one rule, applied in one place (ferry/cli.py runs each command through it).

One line on stderr, ``ferry COMMAND [ACTION]: error: WHAT``, never a traceback (FERRY_DEBUG=1 adds it), and
the exit status says whose fault it is:

* 2, a usage error: argparse's own, a bad value (ValueError), a name that does not exist (a topic, a subject,
  a chroot: RegistryError, SchemaError), a request the cluster refuses as asked (ClientError);
* 1, a runtime error: a service that does not answer (ZooKeeper, the brokers, a metastore), a file that is
  missing, unreadable or unwritable, a full disk (OSError), or a step that failed at run time (RuntimeError);
  anything unforeseen is a runtime error too, named by its class.

Commands therefore raise instead of printing: UsageError (zk/cli_args.py) for input argparse cannot check.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from ferry.client.errors import ClientError, NoBrokersAvailableError
from ferry.schemas.errors import SchemaError
from ferry.zk import NoBrokersError, RegistryError
from ferry.zk.cli_args import UsageError, apply_zk_tls_argument

USAGE = 2
RUNTIME = 1
INTERRUPTED = 130

# checked first: a ZooKeeperUnavailableError is a RegistryError too, but a runtime one (ConnectionError)
RUNTIME_ERRORS: tuple[type[BaseException], ...] = (
    OSError, KazooException, KazooTimeoutError, RuntimeError, NoBrokersAvailableError, NoBrokersError)
USAGE_ERRORS: tuple[type[BaseException], ...] = (UsageError, ValueError, RegistryError, SchemaError, ClientError)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (the rule above) instead of the usage block and the error;
    subparsers inherit the class, so every command and action gets it."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _librdkafka_errors() -> tuple[type[BaseException], ...]:
    """confluent_kafka's KafkaException, only if a command loaded the library (then it may raise it)."""
    module = sys.modules.get("confluent_kafka")
    return (module.KafkaException,) if module is not None else ()


def exit_code(exc: BaseException) -> int:
    """1 or 2 by the rule above (a class in neither list is a surprise: runtime)."""
    if isinstance(exc, RUNTIME_ERRORS + _librdkafka_errors()):
        return RUNTIME
    return USAGE if isinstance(exc, USAGE_ERRORS) else RUNTIME


def describe(exc: BaseException) -> str:
    """The error in one line, naming the file of an OSError (``strerror: path``) and the class of a surprise."""
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f": {exc.filename}" if exc.filename is not None else "")
    elif exc.args and hasattr(exc.args[0], "str"):  # confluent_kafka's KafkaException carries a KafkaError
        text = exc.args[0].str()
    else:
        text = str(exc) or type(exc).__name__
    if not isinstance(exc, RUNTIME_ERRORS + USAGE_ERRORS + _librdkafka_errors()):
        text = f"{type(exc).__name__}: {text}"
    return " ".join(text.split())


def run_command(label: str, func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
    """Run a command's function under the rule; its return value is the exit status."""
    try:
        apply_zk_tls_argument(args)
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # `ferry ... | head`: the reader left; not an error
        _silence_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - the point of the runner: every failure becomes one line
        return fail(label, exc)


def fail(label: str, exc: BaseException) -> int:
    """Print ``exc`` under the rule and return its exit status."""
    if os.environ.get("FERRY_DEBUG"):
        traceback.print_exception(exc)
    print(f"{label}: error: {describe(exc)}", file=sys.stderr, flush=True)
    return exit_code(exc)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not complain about the pipe."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
