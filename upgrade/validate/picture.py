"""A PNG picture of the physical offset space per node (matplotlib, Agg backend).

Rules: one horizontal lane per node; old region (blue), blank fill up to the divide and a migrated
store's gap below classicFrom (grey), DLedger committed region (green), the writable classic
region (purple), gaps (red band); a dashed line at each divided offset, a dotted one at classicFrom; every
located violation a red tick with its check's number. Axis in MiB. Nothing here decides
anything: it draws the report.

Theory of operation: report["nodes"][n]["segments"] are drawn with ``broken_barh``;
violations whose ``space`` is physical (not CQ/index bytes) as markers.
"""
from __future__ import annotations

from upgrade.validate.checks import CHECKS

COLORS = {"old": "#4C72B0", "blank": "#BBBBBB", "dledger": "#55A868", "new": "#8172B2", "gap": "#C44E52"}


def render_png(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    nodes = list(report["nodes"].items())
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.8 * len(nodes)))
    mib = float(1 << 20)
    for lane, (node, info) in enumerate(nodes):
        y = lane * 10
        for seg in info.get("segments", []):
            ax.broken_barh([(seg["start"] / mib, max(seg["end"] - seg["start"], 1) / mib)], (y, 8),
                           facecolors=COLORS[seg["kind"]])
        div = info.get("divided_offset")
        if div is not None:
            ax.axvline(div / mib, ymin=0, ymax=1, color="black", linestyle="--", linewidth=0.8)
            ax.text(div / mib, y + 8.5, f" divide {div:,}", fontsize=7)
        cf = info.get("new", {}).get("classic_from")
        if cf is not None:  # a migrated store's second divide
            ax.axvline(cf / mib, ymin=0, ymax=1, color="black", linestyle=":", linewidth=0.8)
            ax.text(cf / mib, y + 8.5, f" classicFrom {cf:,}", fontsize=7)
        for name, c in report["checks"].items():
            for row in c["violations"]:
                if row["node"] != node or row["offset"] is None or row.get("space", "physical") != "physical":
                    continue  # index- and CQ-space offsets are not on this axis
                x = row["offset"] / mib
                ax.plot([x, x], [y - 1, y + 9], color="red", linewidth=1.5)
                ax.text(x, y - 2.5, str(CHECKS.index(name) + 1), color="red", fontsize=7, ha="center")
    ax.invert_yaxis()
    ax.set_yticks([i * 10 + 4 for i in range(len(nodes))])
    ax.set_yticklabels([n for n, _ in nodes])
    ax.set_xlabel("physical offset (MiB)")
    verdict = "all checks hold" if report["ok"] else "violations (red ticks: check number)"
    ax.set_title(f"offset space per node: {verdict}")
    ax.legend(handles=[Patch(color=v, label=k) for k, v in COLORS.items()], loc="upper left", fontsize=7,
              bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
