"""Helpers of the loss and metric tests: records grouped by task as plain Python lists."""


def per_task(preds, labels, task):
    """{task id: (preds, labels)} as Python lists in record order."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    for p, y, t in zip(preds.tolist(), labels.tolist(), task.tolist()):
        out.setdefault(t, ([], []))
        out[t][0].append(p)
        out[t][1].append(y)
    return out
