"""Run INSIDE a container of the secured datacenters as `python - MODE ARGS < security_probe.py`: what a process on
the datacenter network gets with real clients (confluent-kafka, kazoo) and no or wrong credentials.

    refusals --config FILE --bootstrap HOST:PORT --zookeeper ZK [--topic T]
    read-plaintext --bootstrap HOST:PORT [--topic T]   an anonymous consumer of T from the beginning: messages read
                                                       and the errors it was given (within 20 s)

`refusals` prints `RESULT <json>` of:

    authorized        the user of --config (a positive control): the topics its Metadata shows
    anonymous_plain   a PLAINTEXT client on the SASL_SSL port: metadata served? errors seen
    anonymous_tls     TLS (CA verified) without SASL: metadata served? errors seen
    wrong_password    --config's user with another password: metadata served? errors seen
    write_as_user     a produce to --topic as --config's user: the delivery error
    zk_anonymous      a ZooKeeper client without the digest identity: reading --config's user's credentials, changing a
                      topic's registration (unchanged), creating a znode in the chroot (the
                      exception names)
"""

from __future__ import annotations

import argparse
import json


def props(path: str) -> dict[str, str]:
    out = {}
    for line in open(path).read().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def metadata(conf: dict[str, str], timeout: float = 15.0) -> dict:
    """Metadata through an AdminClient: the topics if served, and every error the client reported."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[str] = []
    admin = AdminClient({**conf, "error_cb": lambda e: errors.append(e.name()), "log_level": 0})
    try:
        md = admin.list_topics(timeout=timeout)
        return {"served": True, "topics": sorted(md.topics), "errors": sorted(set(errors))}
    except KafkaException as e:
        return {"served": False, "errors": sorted(set(errors + [e.args[0].name()]))}


def produce(conf: dict[str, str], topic: str, timeout: float = 30.0) -> dict:
    from confluent_kafka import Producer

    result: dict = {}

    def done(err, _msg) -> None:
        result["error"] = err.name() if err is not None else None

    p = Producer({**conf, "log_level": 0, "message.timeout.ms": int(timeout * 1000)})
    p.produce(topic, b"should never be stored", on_delivery=done)
    left = p.flush(timeout + 10)
    return {"delivered": result.get("error", "undecided") is None, "error": result.get("error"), "left": left}


def zookeeper_anonymous(zookeeper: str, topic: str, user: str) -> dict:
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException

    zk = KazooClient(hosts=zookeeper, timeout=15)
    zk.start(20)
    out: dict = {}
    try:
        path = f"/brokers/topics/{topic}"
        same = zk.get(path)[0]  # readable by everyone (tools); rewriting it unchanged is harmless if allowed
        for what, call in (("read_credentials", lambda: zk.get(f"/config/users/{user}")),
                           ("rewrite_topic", lambda: zk.set(path, same)),
                           ("create_znode", lambda: zk.create("/intruder", b"x"))):
            try:
                call()
                out[what] = "allowed"
            except KazooException as e:
                out[what] = type(e).__name__
    finally:
        zk.stop()
        zk.close()
    return out


def read_plaintext(bootstrap: str, topic: str, seconds: float = 20.0) -> dict:
    import time

    from confluent_kafka import Consumer, TopicPartition

    errors: list[str] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"stranger-{time.time_ns()}", "log_level": 0,
                  "enable.auto.commit": False, "error_cb": lambda e: errors.append(e.name())})
    c.assign([TopicPartition(topic, p, -2) for p in range(4)])  # -2: the beginning
    n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in c.consume(500, timeout=1.0):
            if m.error() is not None:
                errors.append(m.error().name())
            else:
                n += 1
    c.close()
    return {"messages": n, "errors": sorted(set(errors))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["refusals", "read-plaintext"])
    ap.add_argument("--config")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--zookeeper")
    ap.add_argument("--topic", default="page_view")
    args = ap.parse_args()
    if args.mode == "read-plaintext":
        print("RESULT " + json.dumps(read_plaintext(args.bootstrap, args.topic)))
        return
    good = {**props(args.config), "bootstrap.servers": args.bootstrap}
    tls_only = {"bootstrap.servers": args.bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": good["ssl.ca.location"]}
    result = {
        "authorized": metadata(good),
        "anonymous_plain": metadata({"bootstrap.servers": args.bootstrap}),
        "anonymous_tls": metadata(tls_only),
        "wrong_password": metadata({**good, "sasl.password": good["sasl.password"] + "-wrong"}),
        "write_as_user": produce(good, args.topic),
        "zk_anonymous": zookeeper_anonymous(args.zookeeper, args.topic, good["sasl.username"]),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
