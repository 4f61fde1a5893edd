"""`e2e/cli.sh up|down|status|back|tools`: the CLI behind `make cluster-up` and friends.

`up` starts the control plane and a pod-backer daemon, prints how to reach them and
returns, leaving them running; `down` stops everything that `up` started.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path

from e2e import tools
from e2e.cluster import Cluster
from e2e.procs import StartupError
from e2e.tools import MissingBinaryError

DEFAULT_STATE_DIR = tools.E2E_DIR.parent / ".cache" / "cluster"
log = logging.getLogger("e2e")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e", description=__doc__)
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the cluster (and a pod backer) and return")
    sub.add_parser("down", help="stop everything `up` started")
    sub.add_parser("status", help="list the cluster's processes")
    sub.add_parser("back", help="run the pod backer in the foreground (started by `up`)")
    sub.add_parser("tools", help="print the binaries' folder, or what is missing")
    demo = sub.add_parser(
        "demo", help="`make run`: the chart and the demo model's InferenceService, until Ctrl-C"
    )
    demo.add_argument("--model", type=Path, required=True, help="the demo model's folder")
    sub.add_parser("demo-stop", help="`make stop`: stop a running demo and its cluster")
    args = parser.parse_args(argv)
    quiet = args.command == "demo"  # its own progress lines; the pods' logs are in logs/pods
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        if args.command == "demo":
            from e2e import demo as demo_module

            return demo_module.run(args.state_dir, args.model)
        return COMMANDS[args.command](args.state_dir)
    except (StartupError, MissingBinaryError) as exc:  # expected failures: no traceback
        log.error("%s", exc)
        return 1


def cmd_up(state_dir: Path) -> int:
    cluster = Cluster(state_dir)
    start = time.monotonic()
    cluster.up()
    cluster.start_backer_daemon()
    print(f"cluster up in {time.monotonic() - start:.1f} s")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    print(
        f"export PATH={tools.bin_dir()}:$PATH   # kubectl, helm, etcd, kwok of the pinned versions"
    )
    print("stop it with: make cluster-down")
    return 0


def cmd_down(state_dir: Path) -> int:
    if not (state_dir / "state.json").exists():
        print(f"no cluster in {state_dir}")
        return 0
    cluster = Cluster.load(state_dir)
    cluster.down()
    print(f"cluster in {state_dir} stopped")
    return 0


def cmd_status(state_dir: Path) -> int:
    if not (state_dir / "state.json").exists():
        print(f"no cluster in {state_dir}")
        return 1
    cluster = Cluster.load(state_dir)
    for proc in cluster.procs:
        print(f"{proc.name:26} pid {proc.pid:<8} {'running' if proc.alive() else 'STOPPED'}")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0 if len(cluster.alive()) == len(cluster.procs) else 1


def cmd_back(state_dir: Path) -> int:
    cluster = Cluster.load(state_dir)
    backer = cluster.backer(cluster.api_client())
    # SIGTERM from `down` must stop the pods' processes too, not only this loop
    signal.signal(signal.SIGTERM, lambda *_: backer.request_stop())
    try:
        backer.run()
    finally:
        backer.stop()
    return 0


def cmd_tools(state_dir: Path) -> int:
    missing = tools.missing_binaries()
    if missing:
        print(f"missing in {tools.bin_dir()}: {', '.join(missing)}; run `make k8s-tools`")
        return 1
    print(tools.bin_dir())
    return 0


def cmd_demo_stop(state_dir: Path) -> int:
    from e2e import demo

    return demo.stop_running(state_dir)


COMMANDS = {
    "demo-stop": cmd_demo_stop,
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "back": cmd_back,
    "tools": cmd_tools,
}

if __name__ == "__main__":
    sys.exit(main())
