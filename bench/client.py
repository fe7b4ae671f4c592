"""One client phase in its own process: `python bench/client.py '<json spec>'` prints one JSON result.

Running each phase as a child process keeps the orchestrator (and its psutil sampler) out of the
client's interpreter, lets the orchestrator sample the client's CPU too, and bounds a hung client
with a timeout.

spec = {"system": "ferry"|"ferry-sets"|"rabbitmq"|"activemq"|"e2e", "op": "produce"|"consume"|"census",
        "address": bootstrap or port, "queue": name, "messages": N, "batch": B, "time_limit_s": T,
        "rate": msgs/s (e2e producer; 0 = max), "broker_pids": [pids whose CPU the timed window reports],
        "compression": codec of the confluent-kafka producer (ferry), "fetch_bytes": per-fetch max_bytes
        of the message-set consumer (ferry-sets)}
ferry-sets consume = lean_consumer.consume; census (ferry, ferry-sets) = how a topic's log is batched.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (str(HERE), str(HERE.parent)):
    if p not in sys.path:
        sys.path.insert(0, p)


def run(spec: dict) -> dict:
    system, op = spec["system"], spec["op"]
    q, n, limit = spec["queue"], spec["messages"], spec["time_limit_s"]
    addr = spec["address"]
    if system in ("ferry", "ferry-sets"):
        import ferry_client as fc

        if op == "census":
            import lean_consumer

            return lean_consumer.census(addr, q, fc.PARTITION, limit)
        if system == "ferry-sets":
            if op == "consume":
                import lean_consumer

                return lean_consumer.consume(addr, q, fc.PARTITION, n, limit,
                                             max_bytes=spec.get("fetch_bytes", 204_800))
            import lean_producer

            return lean_producer.produce(addr, q, fc.PARTITION, n, spec["batch"], limit)
        if op == "consume":
            return fc.consume_librdkafka(addr, q, n, limit)
        return fc.produce_librdkafka(addr, q, n, spec["batch"], limit, compression=spec.get("compression", "none"))
    if system == "e2e":
        import e2e_client as ec

        if op == "consume":
            return ec.consume_latency(addr, q, n, limit)
        return ec.produce_timestamped(addr, q, n, spec.get("rate", 0), limit)
    if system == "rabbitmq":
        import rabbitmq_client as rc

        return rc.consume(addr, q, n, limit) if op == "consume" else rc.produce(addr, q, n, spec["batch"], limit)
    if system == "activemq":
        import activemq_client as ac

        return ac.consume(addr, q, n, limit) if op == "consume" else ac.produce(addr, q, n, spec["batch"], limit)
    raise ValueError(f"unknown system {system!r}")


def main() -> int:
    spec = json.loads(sys.argv[1])
    import window

    window.configure(spec.get("broker_pids", []))
    try:
        result = run(spec)
        result["window"] = dict(window.result)
    except Exception as e:  # noqa: BLE001 - reported to the orchestrator, which decides
        result = {"ok": False, "messages": 0, "seconds": 0.0, "msgs_per_s": 0.0,
                  "errors": [f"{type(e).__name__}: {e}"], "traceback": traceback.format_exc()[-2000:]}
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
