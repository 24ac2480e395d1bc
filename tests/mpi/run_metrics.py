"""A run's logged curves from its metrics.jsonl, for the tensor and context
parallel run tests (tensor_parallel_run.sh, context_parallel_run.sh)."""
import json


def curves(path):
    """({step: (loss, grad_norm)}, {step: eval_loss}) of the training and
    evaluation rows (grad_norm None where a row has none)."""
    train, evals = {}, {}
    for line in open(path):
        r = json.loads(line)
        if r.get("kind", "train") == "eval" or "eval_loss" in r:
            evals[r["step"]] = r.get("eval_loss", r.get("loss"))
        elif "loss" in r and "step" in r:
            train[r["step"]] = (r["loss"], r.get("grad_norm"))
    return train, evals
