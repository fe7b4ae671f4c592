"""Turn a run's results (results.json) into bench/RESULTS.md and bench/results.png."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The paper's figures (Kreps, Narkhede, Rao, NetDB 2011, section 5; two 8-core machines, 200-byte
# messages, 10 million messages).
PAPER = {"producer_b1": 50_000, "producer_b50": 400_000, "consumer": 22_000, "overhead_kafka": 9,
         "overhead_activemq": 144}
TARGETS = {"producer_b50": 1_000_000, "producer_vs_rabbitmq": 10.0, "consumer": 1_000_000, "overhead": 9.0}

LABELS = {"ferry": "ferry (confluent-kafka)", "ferry-sets": "ferry (message-set producer)",
          "rabbitmq": "RabbitMQ (pika)", "activemq": "ActiveMQ (stomp.py)"}
# ferry's consumer phases: (phase key, label); the message-set consumer's are absent with --no-message-sets
FERRY_CONSUMERS = (("consume", "ferry (confluent-kafka)"),
                   ("consume_ferry-sets", "ferry (message-set consumer)"),
                   ("consume_ferry-sets_1mb", "ferry (message-set consumer), 1 MB fetches"))
CODEC_LABELS = {"none": "none", "gzip": "gzip", "zstd": "zstd", "lz4": "lz4", "snappy": "snappy",
                **{f"topic-{c}": f"{c} (topic's; producer sends none)" for c in ("gzip", "zstd", "lz4", "snappy")}}


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def _x(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "—"
    r = a / b
    return f"{r:,.2f}×" if r < 10 else f"{r:,.0f}×"


def _phase(results: dict, system: str, key: str) -> dict | None:
    s = results["systems"].get(system)
    if not s:
        return None
    p = s["phases"].get(key)
    return p if p and p.get("ok") else None


def producer_rows(results: dict) -> list[tuple[str, str, dict | None, dict | None]]:
    """(system, producer tag, batch-1 phase, batch-50 phase) for each producer that ran."""
    rows = []
    for system, tag in (("ferry", "ferry"), ("ferry", "ferry-sets"), ("rabbitmq", "rabbitmq"),
                        ("activemq", "activemq")):
        out = results["systems"].get(system)
        if not out or not any(k.startswith(f"produce_{tag}_b") for k in out["phases"]):
            continue
        rows.append((system, tag, _phase(results, system, f"produce_{tag}_b1"),
                     _phase(results, system, f"produce_{tag}_b50")))
    return rows


def _rate(p: dict | None) -> float | None:
    return p["msgs_per_s"] if p else None


def _best(*ps: dict | None) -> float | None:
    rates = [p["msgs_per_s"] for p in ps if p]
    return max(rates) if rates else None


def compression_rows(results: dict) -> list[tuple[str, int, dict]]:
    """(codec, batch, phase) of ferry's storage phases with compression, in the order they ran."""
    out = results["systems"].get("ferry") or {}
    rows = []
    for key, p in out.get("phases", {}).items():
        if key.startswith("produce_ferry-") and not key.startswith("produce_ferry-sets_"):
            codec, _, b = key[len("produce_ferry-"):].rpartition("_b")
            rows.append((codec, int(b), p))
    return rows


def best_consumer(results: dict) -> tuple[str | None, float | None]:
    """(label, msg/s) of ferry's fastest consumer phase that succeeded."""
    best: tuple[str | None, float | None] = (None, None)
    for key, label in FERRY_CONSUMERS:
        p = _phase(results, "ferry", key)
        if p and (best[1] is None or p["msgs_per_s"] > best[1]):
            best = (label, p["msgs_per_s"])
    return best


def summary(results: dict) -> dict:
    """The headline numbers the tables, the targets and the plot share."""
    f_b1 = _phase(results, "ferry", "produce_ferry_b1")
    f_b50 = _phase(results, "ferry", "produce_ferry_b50")
    s_b1 = _phase(results, "ferry", "produce_ferry-sets_b1")
    s_b50 = _phase(results, "ferry", "produce_ferry-sets_b50")
    r_b1 = _phase(results, "rabbitmq", "produce_rabbitmq_b1")
    r_b50 = _phase(results, "rabbitmq", "produce_rabbitmq_b50")
    a_b1 = _phase(results, "activemq", "produce_activemq_b1")
    a_b50 = _phase(results, "activemq", "produce_activemq_b50")
    return {
        "ferry_b1": _rate(f_b1), "ferry_b50": _rate(f_b50), "sets_b1": _rate(s_b1), "sets_b50": _rate(s_b50),
        "ferry_best_b50": _best(f_b50, s_b50),
        "rabbit_best": _best(r_b1, r_b50), "activemq_best": _best(a_b1, a_b50),
        "ferry_consumer": _rate(_phase(results, "ferry", "consume")),
        "sets_consumer": _rate(_phase(results, "ferry", "consume_ferry-sets")),
        "ferry_best_consumer_label": best_consumer(results)[0],
        "ferry_best_consumer": best_consumer(results)[1],
        "compressed_overheads": [(c, b, p["overhead_bytes"]) for c, b, p in compression_rows(results)
                                 if p.get("ok") and c != "none" and p.get("overhead_bytes") is not None],
        "rabbit_consumer": _rate(_phase(results, "rabbitmq", "consume")),
        "activemq_consumer": _rate(_phase(results, "activemq", "consume")),
        "ferry_overhead_b50": (f_b50 or {}).get("overhead_bytes"),
        "ferry_overhead_b1": (f_b1 or {}).get("overhead_bytes"),
        "sets_overhead_b50": (s_b50 or {}).get("overhead_bytes"),
    }


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " if i == 0 else " ---: " for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _cost(p: dict | None) -> str:
    """CPU microseconds per message, broker / client: the number that contention does not change much."""
    if not p or not p.get("messages") or not p.get("seconds"):
        return "—"
    w = p.get("window", {})
    k = p["seconds"] / p["messages"] * 1e6 / 100

    def one(key: str) -> str:
        v = w.get(key)
        return "—" if v is None else f"{v * k:.2f}"

    return f"{one('broker_cpu_pct')} / {one('client_cpu_pct')}"


def _cpu(p: dict | None) -> str:
    if not p:
        return "—"
    w = p.get("window", {})
    return f"{_fmt(w.get('broker_cpu_pct'))} / {_fmt(w.get('client_cpu_pct'))} / {_fmt(w.get('other_cpu_pct'))}"


def _codecs(census: dict) -> str:
    codecs = census.get("codecs") or {}
    return ", ".join(f"{k} {v:,}" for k, v in sorted(codecs.items(), key=lambda kv: -kv[1])) or "—"


def _compression_section(results: dict) -> list[str]:
    rows_in = compression_rows(results)
    if not rows_in:
        return []
    L = ["### Storage with compression (ferry, confluent-kafka producer; not the headline)", ""]
    k = results["systems"]["ferry"].get("compression_messages")
    L.append("The payloads are random bytes and stay incompressible: what a codec compresses here is the record "
             "framing inside a set (length, deltas, key/value lengths, headers count: ~9 bytes per record) and "
             "nothing of the 200 payload bytes, so these rows show the framing cost under compression, not a "
             "gain real (compressible) data would see on top. Compression is per RecordBatch, so the 61-byte "
             "batch header stays and the set size matters. "
             + (f"{k:,} messages per phase (fewer than the headline rows: gzip costs producer CPU). " if k else "")
             + "Same measurement as above (st_blocks growth after the broker settled); *sets on disk by codec*, "
             "*records/set* and *log bytes/msg* come from walking the batch headers of the topic afterwards (what "
             "was really written: librdkafka sends a set uncompressed when compressing it does not make it "
             "smaller, so a codec can leave some or all sets uncompressed). Rows marked *topic's*: the producer "
             "sends uncompressed sets into a topic created with that `compression.type`, and the broker converts "
             "every set on append (always, smaller or not, as Kafka does); its cost is in the broker's µs/msg.")
    L.append("")
    rows = []
    ref = _phase(results, "ferry", "produce_ferry_b50")
    if ref:
        c = ref.get("census") or {}
        rows.append(["none (headline row)", "50", _codecs(c), _fmt(ref.get("messages")),
                     _fmt(c.get("records_per_batch"), 1),
                     _fmt(c.get("log_bytes_per_record"), 2), _fmt(ref.get("bytes_per_message"), 1),
                     _fmt(ref.get("overhead_bytes"), 1), _cost(ref), "yes"])
    for codec, b, p in rows_in:
        c = p.get("census") or {}
        ok = p.get("ok")
        rows.append([CODEC_LABELS.get(codec, codec), str(b), _codecs(c), _fmt(p.get("messages")),
                     _fmt(c.get("records_per_batch"), 1), _fmt(c.get("log_bytes_per_record"), 2),
                     _fmt(p.get("bytes_per_message"), 1) if ok else "—", _fmt(p.get("overhead_bytes"), 1) if ok else "—",
                     _cost(p) if ok else "—",
                     "yes" if ok else "**no**: " + "; ".join(p.get("errors", []))[:160]])
    L += _table(["compression.type", "batch (asked)", "sets on disk by codec", "messages", "records/set on disk",
                 "log bytes/msg",
                 "bytes/msg on disk", "overhead", "µs/msg broker / client", "ok"], rows)
    L.append("")
    return L


def render_markdown(results: dict, analysis: str = "") -> str:
    m = results["machine"]
    s = summary(results)
    n = results["messages"]
    L: list[str] = []
    L.append("# ferry benchmarks: the paper's section 5 experiments, with RabbitMQ and ActiveMQ")
    L.append("")
    L.append(f"- **Command:** `{results['command']}`")
    L.append(f"- **Date:** {results['generated']} (run took {results.get('wall_s', 0):.0f} s)")
    for u in results.get("updates", []):
        L.append(f"- **Re-measured** {', '.join(u['replaced'])} on {u['generated']} with `{u['command']}` "
                 f"({u.get('wall_s', 0):.0f} s); the rest is from the run above.")
    L.append(f"- **Machine:** {m['nproc']} cores ({m['cpu_model']}), {m['ram_gb']} GB RAM, Linux {m['kernel']}, "
             f"Python {m['python']}. Clients and brokers run on the same {m['nproc']} cores and compete for them; "
             "the machine is shared with other work (the *other* CPU column says how much ran meanwhile).")
    counts = {k: v.get("messages") for k, v in results["systems"].items()}
    if len(set(counts.values())) <= 1:
        how_many = f"{n:,} messages of 200 bytes per phase for every system"
    else:
        how_many = ("200-byte messages, per phase: " + ", ".join(f"{k} {c:,}" for k, c in counts.items())
                    + "; the peers run ~30-50× slower here, so they get fewer messages to keep the suite to "
                    "minutes (their msg/s hardly depends on the count)")
    compressed = " except the storage rows with compression" if compression_rows(results) else ""
    L.append(f"- **Workload:** {how_many} (random, incompressible payloads; no compression{compressed}), one "
             "queue/topic (one partition) per phase, persistent storage, after a 20,000-message warm-up.")
    versions = results.get("versions", {})
    if versions:
        L.append("- **Versions:** " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    L.append("- **Paper** (Kreps et al., NetDB 2011, two 8-core machines, 10 M messages): producer 50,000 msg/s "
             "(batch 1) and 400,000 msg/s (batch 50); consumer 22,000 msg/s; 9 bytes storage overhead per message "
             "(ActiveMQ 144).")
    L.append("")

    # ---------------------------------------------------------------- producer
    L.append("## Producer throughput (messages/s)")
    L.append("")
    L.append("CPU % columns: share of one core during the timed part, broker / client / everything else on the "
             "machine (the machine has 200). µs/msg columns: CPU time per message, broker / client (all threads, "
             "kernel time included): unlike msg/s, it hardly depends on what else runs.")
    L.append("")
    rows = []
    for _system, tag, b1, b50 in producer_rows(results):
        rows.append([LABELS[tag], _fmt(_rate(b1)), _fmt(_rate(b50)), _x(_rate(b1), PAPER["producer_b1"]),
                     _x(_rate(b50), PAPER["producer_b50"]), _cpu(b1), _cpu(b50), _cost(b1), _cost(b50)])
    rows.append(["Kafka in the paper (2011)", _fmt(PAPER["producer_b1"]), _fmt(PAPER["producer_b50"]), "1×", "1×",
                 "", "", "", ""])
    L += _table(["system (client)", "batch 1", "batch 50", "b1 vs paper", "b50 vs paper", "CPU % b1", "CPU % b50",
                 "µs/msg b1", "µs/msg b50"], rows)
    L.append("")
    L.append("What *batch* means per system (neither AMQP 0-9-1 nor STOMP has message sets; the paper assumed "
             "batch 1 for both peers):")
    L.append("")
    for system, tag, b1, b50 in producer_rows(results):
        for b, p in (("1", b1), ("50", b50)):
            src = p or results["systems"][system]["phases"].get(f"produce_{tag}_b{b}", {})
            if src.get("settings"):
                L.append(f"- {LABELS[tag]}, batch {b}: {src.get('client', '')}; {src['settings']}")
    L.append("")
    L.append("Ratios: ferry's best batch-50 producer is "
             f"**{_x(s['ferry_best_b50'], s['rabbit_best'])} RabbitMQ's best** and "
             f"**{_x(s['ferry_best_b50'], s['activemq_best'])} ActiveMQ's best** producer figure (either batch mode); "
             f"ferry with confluent-kafka at batch 50 is {_x(s['ferry_b50'], s['rabbit_best'])} RabbitMQ's best.")
    L.append("")

    # ---------------------------------------------------------------- consumer
    L.append("## Consumer throughput (messages/s, reading all messages back)")
    L.append("")
    rows = []
    ferry_phases = results["systems"].get("ferry", {}).get("phases", {})
    for key, label in FERRY_CONSUMERS:
        if key not in ferry_phases:
            continue
        p = _phase(results, "ferry", key)
        raw = ferry_phases[key]
        settings = raw.get("settings", "")
        if raw.get("client", "").startswith("message sets"):
            settings = f"{raw['client']}; {settings}"
        rows.append([label, _fmt(_rate(p)), _x(_rate(p), PAPER["consumer"]), "", _cpu(p), _cost(p), settings])
    for system, label, key in (("rabbitmq", LABELS["rabbitmq"], "rabbit_consumer"),
                               ("activemq", LABELS["activemq"], "activemq_consumer")):
        if system not in results["systems"]:
            continue
        p = _phase(results, system, "consume")
        raw = results["systems"][system]["phases"].get("consume", {})
        rows.append([label, _fmt(s[key]), _x(s[key], PAPER["consumer"]),
                     _x(s["ferry_best_consumer"], s[key]), _cpu(p), _cost(p), raw.get("settings", "")])
    rows.append(["Kafka in the paper (2011)", _fmt(PAPER["consumer"]), "1×", "", "", "",
                 "~1000 messages / 200 KB per pull"])
    L += _table(["system (client)", "msg/s", "vs paper", "ferry ×", "CPU % broker / client / other",
                 "µs/msg broker / client", "settings"], rows)
    L.append("")
    L.append("All ferry consumers read the same topic (the confluent-kafka producer's batch-50 topic) from the "
             "page cache; every value is materialised and its length summed, count and bytes checked at the end. "
             "*ferry ×* = ferry's fastest consumer row "
             f"({s['ferry_best_consumer_label'] or '—'}) over the peer's. The message-set consumer sends the "
             "next fetch before it parses the current answer (offsets from the batch headers), so the broker "
             "serves a fetch while the client parses the previous one.")
    L.append("")

    # ---------------------------------------------------------------- storage
    L.append("## Storage: bytes on disk per message")
    L.append("")
    L.append("Allocated bytes (st_blocks, what `du` counts) the store grew by while the phase's N messages were "
             "written, after the broker settled (flushes, checkpoints), divided by N; overhead = that − 200.")
    L.append("")
    rows = []
    for _system, tag, b1, b50 in producer_rows(results):
        rows.append([LABELS[tag], _fmt((b1 or {}).get("bytes_per_message"), 1), _fmt((b1 or {}).get("overhead_bytes"), 1),
                     _fmt((b50 or {}).get("bytes_per_message"), 1), _fmt((b50 or {}).get("overhead_bytes"), 1)])
    rows.append(["Kafka in the paper (2011)", "209", "9", "209", "9"])
    rows.append(["ActiveMQ in the paper (2011)", "344", "144", "344", "144"])
    L += _table(["system", "batch 1: bytes/msg", "overhead", "batch 50: bytes/msg", "overhead"], rows)
    L.append("")
    L += _compression_section(results)

    # ---------------------------------------------------------------- resources
    L.append("## Broker resources during each phase")
    L.append("")
    L.append("CPU in % of one core over the timed part; RSS of the broker process(es) sampled every 0.25 s "
             "(first / last / highest sample of the phase). A log that grows while RSS stays put is the point.")
    L.append("")
    rows = []
    for system, out in results["systems"].items():
        for key, p in out["phases"].items():
            b = p.get("broker", {})
            w = p.get("window", {})
            rows.append([system, key.replace("produce_", "produce ").replace("_b", " batch "),
                         _fmt(p.get("messages")), _fmt(p.get("msgs_per_s")), _fmt(w.get("broker_cpu_pct")), _fmt(b.get("cpu_max_pct")),
                         f"{_fmt(b.get('rss_start_mb'), 1)} / {_fmt(b.get('rss_end_mb'), 1)} / {_fmt(b.get('rss_max_mb'), 1)}",
                         "yes" if p.get("ok") else "**no**: " + "; ".join(p.get("errors", []))[:200]])
    L += _table(["system", "phase", "messages", "msg/s", "broker CPU avg %", "broker CPU max %", "RSS MB start / end / max", "ok"], rows)
    L.append("")

    # ---------------------------------------------------------------- e2e
    e2e = results.get("e2e")
    L.append("## End to end through the mirror (live producer → live broker → `ferry mirror` → offline broker → offline consumer)")
    L.append("")
    if not e2e:
        L.append("Not run (`--skip-e2e`).")
    elif e2e.get("errors") and "throughput" not in e2e:
        L.append("Failed: " + "; ".join(e2e["errors"]))
    else:
        rows = []
        runs = []
        for setting, doc in (("broker defaults (flush.ms 200)", e2e),
                             ("low latency (flush.ms 20)", results.get("e2e_low_latency"))):
            if not doc:
                continue
            for key, label in (("throughput", "as fast as possible"),
                               ("latency", f"paced at {doc.get('latency_rate', 0):,.0f} msg/s")):
                runs.append((f"{setting}: {label}", doc.get(key)))
        for label, run in runs:
            if not run:
                continue
            c, pr, res = run["consumer"], run["producer"], run["resources"]
            lat = c.get("latency_ms", {})
            rows.append([label, _fmt(c.get("messages")), _fmt(pr.get("msgs_per_s")), _fmt(c.get("msgs_per_s")),
                         _fmt(lat.get("p50"), 1), _fmt(lat.get("p99"), 1), _fmt(lat.get("max"), 1),
                         f"{_fmt(res.get('cpu_avg_pct'))} / {_fmt(res.get('rss_start_mb'))} → {_fmt(res.get('rss_end_mb'))}",
                         "yes" if run.get("ok") else "**no** " + "; ".join(pr.get("errors", []) + c.get("errors", []))[:200]])
        L += _table(["run", "messages", "producer msg/s", "end-to-end msg/s", "latency p50 ms", "p99 ms", "max ms",
                     "brokers+mirror CPU % / RSS MB", "ok"], rows)
        L.append("")
        L.append("End-to-end msg/s = messages / (first send → last receive at the offline consumer). Latency = offline "
                 "receive time − send time stamped in the message (same clock). Broker defaults: consumers see only "
                 "flushed data (flush every 10,000 messages or 200 ms), and the mirror produces with acks=all (= fsync "
                 "before the answer), so each hop waits for a flush: that, not CPU, sets the latency floor. The "
                 "low-latency rows run both brokers with `--flush-ms 20` (log.flush.interval.ms).")
    L.append("")

    # ---------------------------------------------------------------- targets
    L.append("## Targets (issue 9) on this machine")
    L.append("")
    t = []
    best_b50 = s["ferry_best_b50"]
    t.append(["producer batch 50 ≥ 1,000,000 msg/s", f"{_fmt(best_b50)} (best client; confluent-kafka {_fmt(s['ferry_b50'])})",
              "met" if best_b50 and best_b50 >= TARGETS["producer_b50"] else "**missed**"])
    ratio = best_b50 / s["rabbit_best"] if best_b50 and s["rabbit_best"] else None
    t.append(["producer batch 50 ≥ 10× RabbitMQ", f"{_x(best_b50, s['rabbit_best'])}",
              "not measured (RabbitMQ not run)" if s["rabbit_best"] is None
              else "met" if ratio and ratio >= TARGETS["producer_vs_rabbitmq"] else "**missed**"])
    bc = s["ferry_best_consumer"]
    t.append(["consumer ≥ 1,000,000 msg/s",
              f"{_fmt(bc)} ({s['ferry_best_consumer_label'] or '—'}; confluent-kafka {_fmt(s['ferry_consumer'])})",
              "met" if bc and bc >= TARGETS["consumer"] else "**missed**"])
    ov = s["ferry_overhead_b50"]
    comp = min(s["compressed_overheads"], key=lambda e: e[2], default=None)
    comp_text = f"; compressed framing: {comp[2]:.1f} ({comp[0]}, batch {comp[1]})" if comp else ""
    # uncompressed producers into a topic with compression.type: the broker converts (the b50 headline batch)
    topic_rows = [e for e in s["compressed_overheads"] if e[0].startswith("topic-") and e[1] == 50]
    topic = min(topic_rows, key=lambda e: e[2], default=None)
    if topic:
        comp_text += (f"; uncompressed producer into a topic with compression.type={topic[0][len('topic-'):]}: "
                      f"{topic[2]:.1f} (batch 50)")
    comp_met = (" (uncompressed); met with compression of the framing" if comp and comp[2] <= TARGETS["overhead"]
                else "")
    if topic and topic[2] <= TARGETS["overhead"]:
        comp_met += ", also by the broker for uncompressed producers (topic compression.type)"
    t.append(["≤ 9 bytes overhead per message",
              f"{_fmt(ov, 1)} (batch 50), {_fmt(s['ferry_overhead_b1'], 1)} (batch 1){comp_text}",
              "met" if ov is not None and ov <= TARGETS["overhead"] else "**missed**" + comp_met])
    L += _table(["target", "measured", ""], t)
    L.append("")

    # ---------------------------------------------------------------- profiles
    profiles = results["systems"].get("ferry", {}).get("profiles", {})
    if profiles:
        L.append("## Where the broker's time goes (py-spy, separate profiled pass)")
        L.append("")
        L.append("py-spy samples the broker's threads at 200 Hz without pausing it (`--nonblocking`; the flusher "
                 "thread and the event loop's epoll wait show up too). *self* = share of samples with that function "
                 "on top (time in a C call or syscall counts for the Python function that made it: `sock_sendall` "
                 "includes the loopback TCP path, `pwrite_all` the page-cache copy); *incl.* = share of samples in "
                 "which the broker function appears anywhere on the stack.")
        L.append("")
        for key, entry in profiles.items():
            prof = entry.get("profile") or {}
            if not prof or "samples" not in prof:
                continue
            w = entry.get("window", {})
            L.append(f"### {key.replace('_', ' ')}: {_fmt(entry.get('msgs_per_s'))} msg/s while profiled, "
                     f"{prof['samples']:,} samples; CPU % broker / client / other: {_fmt(w.get('broker_cpu_pct'))} / "
                     f"{_fmt(w.get('client_cpu_pct'))} / {_fmt(w.get('other_cpu_pct'))}")
            L.append("")
            L.append("| self % | function (top of stack) | incl. % | broker function (anywhere on the stack) |")
            L.append("| ---: | --- | ---: | --- |")
            selfs = prof.get("top_self", [])[:12]
            incls = [e for e in prof.get("top_inclusive_broker", prof.get("top_inclusive", []))][:12]
            for i in range(max(len(selfs), len(incls))):
                a = selfs[i] if i < len(selfs) else None
                b = incls[i] if i < len(incls) else None
                L.append(f"| {a[1] if a else ''} | {'`' + a[0] + '`' if a else ''} | {b[1] if b else ''} | "
                         f"{'`' + b[0] + '`' if b else ''} |")
            L.append("")
    if analysis.strip():
        L.append(analysis.strip())
        L.append("")
    errs = [(k, v["errors"]) for k, v in results["systems"].items() if v.get("errors")]
    if errs:
        L.append("## Errors")
        L.append("")
        for k, e in errs:
            L.append(f"- {k}: {'; '.join(e)}")
        L.append("")
    L.append("Raw numbers: `bench/results.json`. Plot: `bench/results.png`.")
    return "\n".join(L) + "\n"


def render_plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summary(results)
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    counts = sorted({v.get("messages", 0) for v in results["systems"].values()}, reverse=True)
    fig.suptitle(f"ferry vs RabbitMQ vs ActiveMQ — {' / '.join(f'{c:,}' for c in counts)} × 200-byte messages "
                 f"per phase, {results['machine']['nproc']} shared cores ({results['generated'][:10]})")

    # producer
    ax = axes[0][0]
    names, b1s, b50s = [], [], []
    for _system, tag, b1, b50 in producer_rows(results):
        names.append(LABELS[tag].replace(" (", "\n("))
        b1s.append(_rate(b1) or 0)
        b50s.append(_rate(b50) or 0)
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], b1s, 0.4, label="batch 1")
    ax.bar([i + 0.2 for i in x], b50s, 0.4, label="batch 50")
    ax.axhline(PAPER["producer_b1"], color="C0", ls=":", label="paper Kafka, batch 1 (50k)")
    ax.axhline(PAPER["producer_b50"], color="C1", ls=":", label="paper Kafka, batch 50 (400k)")
    ax.axhline(TARGETS["producer_b50"], color="red", ls="--", lw=1, label="target batch 50 (1M)")
    ax.set_yscale("log")
    ax.set_xticks(list(x), names, fontsize=8)
    ax.set_ylabel("messages/s (log)")
    ax.set_title("Producer throughput")
    ax.legend(fontsize=7)

    # consumer
    ax = axes[0][1]
    cons = [("ferry\n(confluent-kafka)", s["ferry_consumer"])]
    if s["sets_consumer"] is not None:
        cons.append(("ferry\n(message-set\nconsumer)", s["sets_consumer"]))
    cons += [("RabbitMQ\n(pika)", s["rabbit_consumer"]), ("ActiveMQ\n(stomp.py)", s["activemq_consumer"])]
    ax.bar([c[0] for c in cons], [c[1] or 0 for c in cons], color=[f"C{i + 2}" for i in range(len(cons))])
    ax.axhline(PAPER["consumer"], color="k", ls=":", label="paper Kafka (22k)")
    ax.axhline(TARGETS["consumer"], color="red", ls="--", lw=1, label="target (1M)")
    ax.set_yscale("log")
    ax.set_ylabel("messages/s (log)")
    ax.set_title("Consumer throughput")
    ax.legend(fontsize=7)

    # storage
    ax = axes[1][0]
    names, ov1, ov50 = [], [], []
    for _system, tag, b1, b50 in producer_rows(results):
        names.append(LABELS[tag].replace(" (", "\n("))
        ov1.append((b1 or {}).get("overhead_bytes") or 0)
        ov50.append((b50 or {}).get("overhead_bytes") or 0)
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], ov1, 0.4, label="batch 1")
    ax.bar([i + 0.2 for i in x], ov50, 0.4, label="batch 50")
    ax.axhline(PAPER["overhead_kafka"], color="k", ls=":", label="paper Kafka (9 B)")
    ax.axhline(PAPER["overhead_activemq"], color="C4", ls=":", label="paper ActiveMQ (144 B)")
    ax.set_xticks(list(x), names, fontsize=8)
    ax.set_ylabel("bytes on disk per message − 200")
    ax.set_title("Storage overhead per message")
    ax.legend(fontsize=7)

    # broker RSS over the run
    ax = axes[1][1]
    for i, (system, out) in enumerate(results["systems"].items()):
        t_off = 0.0
        xs, ys = [], []
        for p in out["phases"].values():
            tl = p.get("broker_timeline") or []
            for t, _cpu, rss in tl:
                xs.append(t_off + t)
                ys.append(rss)
            if tl:
                t_off += tl[-1][0]
        if xs:
            ax.plot(xs, ys, label=system, color=f"C{i + 2}")
    ax.set_xlabel("seconds of client phases (concatenated)")
    ax.set_ylabel("broker RSS (MB)")
    ax.set_title("Broker memory while the store grows")
    ax.legend(fontsize=7)

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: dict, md_path: Path, png_path: Path, json_path: Path) -> None:
    analysis_file = HERE / "ANALYSIS.md"
    analysis = analysis_file.read_text() if analysis_file.exists() else ""
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    md_path.write_text(render_markdown(results, analysis))
    render_plot(results, png_path)
