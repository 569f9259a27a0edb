"""The namespace cluster of scripts/cluster.sh as a `conf/platform/` file for `hpcshuffle scale`, from
its settings (`cluster.sh status`) and the rates experiments/cluster_scaling.py measured on it
(experiments/cluster_probe.py, `python -m hpcshuffle.scale.pingpong`). Every number carries a
comment saying which of them it comes from; nothing is fitted to training runs."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import yaml

from hpcshuffle.scale.jitter import fit_noise
from hpcshuffle.scale.platform_yaml import load_platform, platform_from_dict

RATE_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
              "bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12}  # tc's units ("bps": bytes/s)
NOT_LIMITING = 1.0e12

HEADER = """\
# written by {written_by} ({date}); `calibration:` below keeps every measurement.
# All values SI (bytes, bytes/s, seconds). Sources:
#  [SET]   `bash scripts/cluster.sh status`: {settings}
#  [NODE]  experiments/cluster_probe.py node on one node (srun -N 1 -n 1 --cpus-per-task 1), with the machine as it
#          was then (other jobs included), through the loader's own code: {files} dataset files read as GS reads them
#          (pages dropped), a timed pass after an untimed one; a {big_mib} MiB file streamed; the same files read and
#          loaded as batches from a node-local store; FW+BW
#  [LINK]  python -m hpcshuffle.scale.pingpong {link_where}: {link_how}
#  [INTRA] the same with both ranks on one node (srun -N 1 -n 2)
#  [ARED]  experiments/cluster_probe.py allreduce ({allreduce_where}): learner.average_gradients over gloo, 2 ranks
#  [THIS]  conf/platform/this_machine.yaml (`hpcshuffle scale calibrate` on this machine's cores): not measured here
#  [RUN]   what experiments/cluster_scaling.py runs: jobs/train.sbatch, conf/loader/default.yaml
# The nodes are namespaces of one machine: every node's cores are the machine's {cpus}, shared by all nodes
# (machine_cores), and by whatever else runs there, which the simulation cannot see.
"""

BODY = """\
name: nscluster
description: >-
  scripts/cluster.sh's namespace cluster: {nodes} nodes of one machine on a bridge (links {link}), a
  storage node serving GlusterFS at /pfs (link {storage_link}, {latency} ms per read set on its brick)
nodes: {nodes}                             # [SET] nodes
ranks_per_node: {ranks_per_node}                    # [RUN] sbatch --ntasks-per-node
cpu_cores_per_node: {cpus}                # [NODE] os.cpu_count() on a node: the machine's cores (see above)
machine_cores: {cpus}                     # [NODE] the same cores, shared by every node
accelerators_per_node: 0            # [SET] none: FW+BW on the CPU cores

network:
  topology: star                    # [SET] every node's veth on one bridge
  # the setting link={link} is {link_set}
  link_bandwidth: {link_bw:.4e}     # [LINK] 4 MiB ping-pong
  link_latency: {link_lat:.4e}       # [LINK] half a 1-byte round trip
  intra_node_bandwidth: {intra_bw:.4e}  # [INTRA] 4 MiB ping-pong, shared memory
  intra_node_latency: {intra_lat:.4e}  # [INTRA] half a 1-byte round trip

local:                              # node-local /tmp: a directory of the machine's disk, through its page cache
  read_bandwidth: {local_read:.4e}     # [NODE] a {big_mib} MiB node-local file read back
  write_bandwidth: {local_write:.4e}    # [NODE] the same file written and fsynced
  # a store's read per file ({local_file:.3g} s) minus its bytes at read_bandwidth
  file_latency: {local_lat:.4e}       # [NODE]

shared:                             # /pfs: one GlusterFS brick on the storage node, FUSE clients with direct I/O
  # the setting storage_link={storage_link} is {storage_set}
  read_bandwidth: {shared_bw:.4e}     # [NODE] {shared_bw_how}
  metadata_rate: {not_limiting:.4e}      # ASSUMPTION: not limiting (not measured; the per-file cost is file_latency)
  servers: 1                     # ASSUMPTION: no queue (not measured; the per-file cost is file_latency)
  service: {{dist: fixed, mean: 0.0}}
  # a file read as GS reads it ({shared_file:.3g} s) minus its bytes at read_bandwidth and the client's CPU;
  # it includes the storage_latency_ms={latency} set on the brick [SET]
  file_latency: {shared_lat:.4e}       # [NODE]
  # CPU time of the node's glusterfs client per file read ({client_cpu_measured:.3g} s measured), as far as
  # the read's time leaves after its bytes
  client_cpu_per_file: {client_cpu:.4e}  # [NODE]

loader:
  workers: 1                        # [RUN] loader.io_threads=1: one file in flight
  prefetch: 0                       # [RUN] loader.workers=0: the rank reads its batch in the loop
  # batches loaded from a node-local store as the loader loads them (read, seeded augmentation, decode to
  # {image_size}×{image_size}, collate): {loaded:.3g} s per file on one thread, minus the store's read per file
  cpu_per_file: {loader_cpu:.4e}       # [NODE]

allreduce:
  # ({allreduce_s:.3g} s per allreduce − gradient_bytes / bandwidth) / 2(M−1) at M = 2
  alpha: {alpha:.4e}              # [ARED]
  bandwidth: {link_bw:.4e}          # [LINK] link_bandwidth

exchange:                           # [THIS] not measured on the cluster
  cpu_per_sample: {exchange_cpu:.4e}     # [THIS]
  epoch_overhead: {exchange_epoch:.4e}     # [THIS]
{noise}
models:
  {model}:
    # forward + backward of a batch of {batch} inputs of {image_size}×{image_size} on one thread, per sample
    fwbw_per_sample: {fwbw:.4e}    # [NODE]
    gradient_bytes: {gradient_bytes:.4e}     # [NODE] 4 B × the model's parameters

datasets:
  {dataset}:
    samples: {samples}                    # the training images experiments/cluster_scaling.py made on /pfs
    sample_bytes: {sample_bytes:.4e}       # [NODE] mean bytes of the files read
"""


def rate_bytes_per_s(rate: str) -> float | None:
    """tc's rate ("10gbit", "500mbit", "1gbps") in bytes/s; None for "none" or a form not known here."""
    match = re.fullmatch(r"([0-9.]+)([a-z]+)", str(rate).lower())
    if not match or match.group(2) not in RATE_UNITS:
        return None
    return float(match.group(1)) * RATE_UNITS[match.group(2)]


def described(rate: str) -> str:
    """A tc rate as the platform's comments give it: in bytes/s, or "unshaped"."""
    rate_bps = rate_bytes_per_s(rate)
    return f"{rate_bps:.4g} B/s" if rate_bps else "unshaped"


LINK_WHERE = "between two nodes (srun -N 2 --mpi=pmi2)"
ALLREDUCE_WHERE = "srun -N 2"


def write_platform(path: Path, settings: dict, measured: dict, ranks_per_node: int, model: str,
                   dataset: tuple[str, int], image_size: int, batch: int) -> None:
    """Write `platform_text`'s platform yaml to `path`, checked by loading it back."""
    text = platform_text(settings, measured, ranks_per_node, model, dataset, image_size, batch)
    platform_from_dict(yaml.safe_load(text), str(path))  # a platform `hpcshuffle scale` refuses fails here
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def noise_lines(contention: dict, node: dict, batch: int) -> str:
    """The exchange's `noise` lines from a contention probe (experiments/cluster_probe.py contention): the
    jitter whose mean makes the engine's fair sharing of the cores give the iteration measured with that
    many ranks in lockstep, each rank's FW+BW the node's own (scale/jitter.py)."""
    step_s = node["fwbw_per_sample_s"] * batch
    noise = fit_noise(step_s, contention["iteration_s"], contention["ranks"], contention["cpus"])
    fitted = f"{{dist: lognormal, mean: {noise.mean:.4e}, cv: {noise.cv}}}" if noise.mean else "{dist: fixed, mean: 0.0}"
    return (f"  # experiments/cluster_probe.py contention on one node: {contention['ranks']} ranks' FW+BW in lockstep on the "
            f"{contention['cpus']} cores took {contention['iteration_s']:.4g} s "
            f"an iteration\n  # (p10-p90 {contention['iteration_p10_s']:.3g}-{contention['iteration_p90_s']:.3g}); "
            f"each alone {step_s:.3g} s [NODE]:\n  # the mean fitted to that by hpcshuffle/scale/jitter.py, the cv assumed\n"
            f"  noise: {fitted}\n")


def platform_text(settings: dict, measured: dict, ranks_per_node: int, model: str, dataset: tuple[str, int],
                  image_size: int, batch: int, written_by: str = "experiments/cluster_scaling.py") -> str:
    """The platform yaml, every number with a comment naming its source (and `written_by`, the script).

    `measured`: {"node": cluster_probe node, "link" and "allreduce" (absent on a one-node cluster),
    "intra_node": ping-pong inside a node}; "link" and "allreduce" may say where they were measured
    ("where"), by default between two nodes, and "node" how its "shared_read_Bps" was ("shared_read_how"),
    by default the large file streamed. `dataset`: (key, training samples).
    """
    node, intra = measured["node"], measured["intra_node"]
    link = measured.get("link", intra)  # a one-node cluster has no link between nodes to measure
    allreduce = measured.get("allreduce", {"allreduce_s": 0.0, "gradient_bytes": node["gradient_bytes"]})
    this_machine = load_platform("this_machine").exchange
    sample_bytes = node["sample_bytes"]
    # what the engine charges beside bandwidth (scale/engine.py: latency, then CPU, then bytes)
    local_latency = node["local_file_s"] - sample_bytes / node["local_read_Bps"]
    # the client's CPU runs while the bytes arrive: it is charged only as far as the measured read
    # leaves time after its bytes, so the charges never add up to more than the read took
    beyond_bytes = max(0.0, node["shared_file_s"] - sample_bytes / node["shared_read_Bps"])
    client_cpu = min(node["client_cpu_per_file_s"], beyond_bytes)
    shared_latency = beyond_bytes - client_cpu
    loader_cpu = node["loaded_per_file_s"] - node["local_file_s"]
    alpha = (allreduce["allreduce_s"] - allreduce["gradient_bytes"] / link["bandwidth_Bps"]) / 2
    noise = noise_lines(measured["contention"], node, batch) if "contention" in measured else ""
    values = {
        "nodes": settings["nodes"], "link": settings["link"], "storage_link": settings["storage_link"],
        "latency": settings["storage_latency_ms"], "ranks_per_node": ranks_per_node, "cpus": node["cpus"],
        "link_bw": link["bandwidth_Bps"], "link_lat": link["latency_s"], "link_set": described(settings["link"]),
        "intra_bw": intra["bandwidth_Bps"], "intra_lat": intra["latency_s"],
        "local_read": node["local_read_Bps"], "local_write": node["local_write_Bps"],
        "local_file": node["local_file_s"], "local_lat": max(0.0, local_latency),
        "shared_bw": node["shared_read_Bps"], "storage_set": described(settings["storage_link"]),
        "shared_bw_how": node.get("shared_read_how", f"a {round(node['big_bytes'] / 2**20)} MiB file streamed from /pfs"),
        "shared_file": node["shared_file_s"], "client_cpu": client_cpu,
        "shared_lat": shared_latency, "client_cpu_measured": node["client_cpu_per_file_s"], "not_limiting": NOT_LIMITING, "loaded": node["loaded_per_file_s"],
        "loader_cpu": max(0.0, loader_cpu), "image_size": image_size, "batch": batch, "alpha": max(0.0, alpha),
        "allreduce_s": allreduce["allreduce_s"], "exchange_cpu": this_machine.cpu_per_sample,
        "exchange_epoch": this_machine.epoch_overhead, "model": model, "fwbw": node["fwbw_per_sample_s"],
        "gradient_bytes": node["gradient_bytes"], "dataset": dataset[0], "samples": dataset[1],
        "sample_bytes": sample_bytes, "big_mib": round(node["big_bytes"] / 2**20), "noise": noise,
    }
    header = HEADER.format(written_by=written_by, date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                           settings=" ".join(f"{k}={v}" for k, v in settings.items()), files=node["files"],
                           big_mib=values["big_mib"], cpus=node["cpus"],
                           link_how="measured" if "link" in measured else "a one-node cluster: the [INTRA] figures",
                           link_where=link.get("where", LINK_WHERE),
                           allreduce_where=allreduce.get("where", ALLREDUCE_WHERE))
    calibration = {"calibration": {"written_by": written_by, "settings": settings,
                                   "measured": measured}}
    return header + "\n" + BODY.format(**values) + "\n" + yaml.safe_dump(calibration, sort_keys=False)
