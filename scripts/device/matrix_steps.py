"""The step records a device matrix script (pipeline_matrix.sh, budget_matrix.sh) appends to OUT_DIR/steps.jsonl, one
JSON object a line ({"step", "rc", "seconds"}), as its summary script reads them."""
import json
import os


def read_steps(out):
    """The steps recorded so far in out/steps.jsonl, in order ([] before the first)."""
    steps = []
    path = os.path.join(out, "steps.jsonl")
    if os.path.exists(path):
        for line in open(path):
            if line.strip():
                steps.append(json.loads(line))
    return steps
