"""Score stored accuracy studies again under today's rule for "reaches GS", training nothing.

    python experiments/accuracy_rescore.py results/reference/accuracy_study.json \
        results/reference/accuracy_study_norm_global.json ...

Each JSON is summarised again from the runs it stores (analysis/study.py: paired gaps, their 95 %
and 90 % intervals, the smallest q reaching GS), its cells keep the plans' predictions and measures,
and where `<stem>_preregistered.json` lies beside it the pre-registration is held against it again.
So is the peers' one (`<stem>_peers_preregistered.json`) for a study that holds its check; without
that file nothing is rewritten, since re-scoring would drop `preregistered_peers`. A variant filed
inside a JSON (`--into`) is replaced by the re-scored study among the arguments that holds the same
runs, or re-scored in place (without its pre-registration) when none does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hpcshuffle.studies.accuracy_peers import peer_preregistration_check
from hpcshuffle.studies.accuracy_report import rescored

VARIANT_KEYS = ("setup", "rows", "cells", "gaps", "runs", "quality_vs_gap", "preregistered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="+", type=Path, help="study JSONs written by experiments/accuracy_study.py")
    args = parser.parse_args()
    done: dict[Path, dict] = {}
    for path in args.studies:
        study = json.loads(path.read_text())
        prereg_path = path.with_name(f"{path.stem}_preregistered.json")
        prereg = json.loads(prereg_path.read_text()) if prereg_path.exists() else None
        done[path] = {**rescored(study, prereg), **({"variants": study["variants"]} if "variants" in study else {})}
        if "preregistered_peers" in study:
            peers_path = path.with_name(f"{path.stem}_peers_preregistered.json")
            if not peers_path.exists():
                sys.exit(f"{path} holds the peers' pre-registration check but {peers_path} is missing; put it "
                         "beside the study (git checkout it) so re-scoring keeps it")
            done[path]["preregistered_peers"] = peer_preregistration_check(
                done[path], json.loads(peers_path.read_text()))
        print(f"{path}: re-scored" + (f" against {prereg_path.name}" if prereg else "")
              + (" and the peers' pre-registration" if "preregistered_peers" in study else ""))
    for path, study in done.items():
        for key, variant in study.get("variants", {}).items():
            twin = next((other for other in done.values() if other is not study and other["runs"] == variant["runs"]),
                        None)
            made = twin if twin is not None else rescored(variant, None)
            study["variants"][key] = {field: made[field] for field in VARIANT_KEYS if field in made}
            print(f"{path}: variant {key} " + ("filed from its own re-scored JSON" if twin else "re-scored in place"))
        path.write_text(json.dumps(study, indent=1) + "\n")


if __name__ == "__main__":
    main()
