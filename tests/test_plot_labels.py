"""A log axis' powers of ten are labelled in plain text (Unicode superscripts), not parsed as mathtext per tick."""

from __future__ import annotations

import pytest

from harness.report.plots import log_axis, power_label


@pytest.mark.parametrize(("mathtext", "plain"), [
    (r"$\mathdefault{10^{-4}}$", "10⁻⁴"), (r"$\mathdefault{10^{0}}$", "10⁰"), (r"$\mathdefault{10^{12}}$", "10¹²"),
    (r"$\mathdefault{2\times10^{-4}}$", "2×10⁻⁴"), (r"$\mathdefault{10^{−3}}$", "10⁻³"),
    ("", ""), (r"$\mathdefault{0.01}$", r"$\mathdefault{0.01}$"), (r"$\mathdefault{-10^{3}}$", r"$\mathdefault{-10^{3}}$"),
])
def test_power_label(mathtext: str, plain: str) -> None:
    assert power_label(mathtext) == plain


def test_a_log_axis_shows_its_decades_without_mathtext() -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    try:
        ax.set_xscale("log")
        ax.set_xlim(1e-6, 1e-2)
        log_axis(ax.xaxis)
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    finally:
        plt.close(fig)
    assert {"10⁻⁶", "10⁻⁴", "10⁻²"} <= set(labels) and not any("$" in s for s in labels)
