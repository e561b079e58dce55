"""`svg_charts` and the page's feature plots drawn with them: well-formed SVG whose bars
stand for the values given."""

import base64
import xml.etree.ElementTree as ElementTree

import pytest

from pipeline.inspect import report_page, svg_charts
from pipeline.inspect.run_details import FeatureStats

SVG = "{http://www.w3.org/2000/svg}"


def _parsed(uri: str) -> ElementTree.Element:
    prefix = "data:image/svg+xml;base64,"
    assert uri.startswith(prefix)
    return ElementTree.fromstring(base64.b64decode(uri[len(prefix):]))


def _bars(root: ElementTree.Element):
    """The data bars (the legend's squares carry no title): (x, width, height, fill, value)."""
    return [(float(r.get("x")), float(r.get("width")), float(r.get("height")), r.get("fill"),
             float(r.find(f"{SVG}title").text))
            for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]


def _texts(root: ElementTree.Element):
    return [t.text for t in root.iter(f"{SVG}text")]


def test_grouped_bars_are_as_tall_as_their_values_side_by_side_and_names_are_escaped():
    root = _parsed(svg_charts.categories("payment_type", ["Cash", "A&B <co>"],
                                         [("span 1", "#111111", [0.6, 0.3]), ("span 2", "#222222", [0.4, 0.2])]))
    bars = _bars(root)
    assert [(fill, value) for _, _, _, fill, value in bars] == [
        ("#111111", 0.6), ("#111111", 0.3), ("#222222", 0.4), ("#222222", 0.2)]
    heights = {value: height for _, _, height, _, value in bars}
    # The axis tops out at 1 (the next of 1, 2, 2.5, 5 x 10^k above 0.6): heights in proportion.
    assert heights[0.6] == pytest.approx(2 * heights[0.3]) == pytest.approx(1.5 * heights[0.4])
    assert "1" in _texts(root) and "0.5" in _texts(root)
    # A group's bars side by side, groups left to right.
    (x_cash_1, width, *_), (x_ab_1, *_), (x_cash_2, *_), _ = bars
    assert x_cash_2 == pytest.approx(x_cash_1 + width) and x_ab_1 > x_cash_2
    assert {"payment_type", "A&B <co>", "span 1", "span 2"} <= set(_texts(root))


def test_a_histogram_places_each_bucket_by_its_bounds_on_one_axis():
    root = _parsed(svg_charts.histogram("fare", [("span 1", "#111111", [(0.0, 10.0, 0.25), (10.0, 40.0, 0.75)]),
                                                 ("span 2", "#222222", [(20.0, 40.0, 1.0)])]))
    (x0, w0, h0, *_), (x1, w1, h1, *_), (x2, w2, h2, *_) = _bars(root)
    assert w1 == pytest.approx(3 * w0) and x1 == pytest.approx(x0 + w0)
    assert x2 == pytest.approx(x0 + 2 * w0) and x2 + w2 == pytest.approx(x1 + w1)
    assert h2 == pytest.approx(4 * h0) and h1 == pytest.approx(3 * h0)
    assert "0" in _texts(root) and "40" in _texts(root)


def test_bounds_that_four_digits_do_not_tell_apart_get_more():
    root = _parsed(svg_charts.histogram("tract", [("a", "#111111", [(17031081402.0, 17031842300.0, 1.0)])]))
    assert {"1.7031e+10", "1.7032e+10"} <= set(_texts(root))


def test_a_chart_without_values_is_an_empty_frame():
    for uri in (svg_charts.histogram("x", [("a", "#111111", [])]), svg_charts.categories("y", [], [])):
        root = _parsed(uri)
        assert _bars(root) == [] and root.get("width") == str(svg_charts.WIDTH)


def test_the_page_s_feature_plots_show_each_span_s_shares():
    labels = ["span 7", "span 8"]
    previous = FeatureStats(name="company", numeric=False, count=100, missing=0.0, top=[("Flash", 60), ("Blue", 40)])
    newest = FeatureStats(name="company", numeric=False, count=200, missing=0.0, top=[("Blue", 150), ("Flash", 50)])
    bars = _bars(_parsed(report_page.feature_plot("company", newest, previous, labels)))
    # The newest span's most frequent values, in its order; each span's share of each.
    assert [value for *_, value in bars] == [0.4, 0.6, 0.75, 0.25]

    numeric = FeatureStats(name="fare", numeric=True, count=4, missing=0.0, buckets=[(0.0, 5.0, 1.0), (5.0, 9.0, 3.0)])
    bars = _bars(_parsed(report_page.feature_plot("fare", numeric, None, labels)))
    assert [value for *_, value in bars] == [0.25, 0.75]


def test_horizontal_bars_run_from_the_axis_low_end_and_mark_a_value():
    root = _parsed(svg_charts.horizontal_bars(
        ["Overall", "hour=1"], [("candidate", ["#111111", "#111111"], [0.9, 0.75]),
                                ("baseline", ["#222222", "#222222"], [0.8, 0.5])],
        "AUC", low=0.5, high=1.0, marker=0.75))
    bars = _bars(root)
    widths = {value: width for _, width, _, _, value in bars}
    # Each bar as long as its value's distance from the axis' low end, 0.5.
    assert widths[0.9] == pytest.approx(widths[0.75] * 0.4 / 0.25)
    assert widths[0.5] == 0 and widths[0.8] == pytest.approx(widths[0.9] * 0.75)
    assert {"Overall", "hour=1", "AUC", "candidate", "baseline"} <= set(_texts(root))
    marker = [line for line in root.iter(f"{SVG}line") if line.get("stroke") == "black"]
    starts = {x for x, *_ in bars}
    assert len(marker) == 1 and len(starts) == 1
    assert float(marker[0].get("x1")) == pytest.approx(starts.pop() + widths[0.75])


def test_lines_put_each_series_on_its_own_axis_and_mark_the_kept_epoch():
    root = _parsed(svg_charts.lines([1, 2, 3], [("train_loss", "#111111", [0.3, 0.2, 0.1], "left"),
                                                ("eval_auc", "#222222", [0.90, 0.95, 0.99], "right")],
                                    "epoch", "loss", "eval AUC", marker=2, marker_label="kept: epoch 2"))
    points = {line.get("stroke"): [tuple(map(float, p.split(","))) for p in line.get("points").split()]
              for line in root.iter(f"{SVG}polyline")}
    loss, auc = points["#111111"], points["#222222"]
    # Falling loss, rising AUC (SVG's y grows downwards), each filling its own axis.
    assert [y for _, y in loss] == sorted(y for _, y in loss) and [y for _, y in auc] == sorted(
        (y for _, y in auc), reverse=True)
    assert loss[0][1] == pytest.approx(auc[-1][1]) and loss[-1][1] == pytest.approx(auc[0][1])
    dashed = [line for line in root.iter(f"{SVG}line") if line.get("stroke-dasharray")]
    assert len(dashed) == 1 and float(dashed[0].get("x1")) == pytest.approx(loss[1][0])
    assert {"loss", "eval AUC", "epoch", "kept: epoch 2", "train_loss", "eval_auc"} <= set(_texts(root))


def test_a_run_page_draws_without_matplotlib(tmp_path):
    import subprocess
    import sys

    script = """
import sys
from pipeline.inspect import report_page, run_details
from pipeline.outcome import NodeRun, Outcome, RunReport
stats = run_details.FeatureStats(name="fare", numeric=True, count=4, missing=0.0, buckets=[(0.0, 5.0, 1.0)])
report = RunReport(outcome=Outcome.PUSHED, run_id="r1", nodes=[NodeRun("Trainer", "ran", 3.0)])
details = run_details.RunDetails(report=report, stats={1: {"fare": stats}, 2: {"fare": stats}}, previous_span=1,
                                 newest_span=2, history=[{"train_loss": 0.3, "eval_loss": 0.2, "eval_auc": 0.9}],
                                 best_epoch=1)
# Keras 3 (tfx-1.21) imports matplotlib for its own plots: there, no figure may be saved.
loaded = "matplotlib" in sys.modules
if loaded:
    import matplotlib.figure

    def refuse(*args, **kwargs):
        raise AssertionError("the page saved a matplotlib figure")

    matplotlib.figure.Figure.savefig = refuse
path = report_page.write(sys.argv[1], details)
print(path, "matplotlib" in sys.modules and not loaded)
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path, imported = done.stdout.split()
    assert imported == "False"
    text = open(path, encoding="utf-8").read()
    assert text.count("data:image/svg+xml;base64,") == 3  # timings, the feature, training


def test_values_a_diverged_run_or_odd_data_give_still_draw_a_well_formed_chart():
    nan, inf = float("nan"), float("inf")
    # A loss that became NaN: the line breaks there, the other points keep their scale.
    root = _parsed(svg_charts.lines([1, 2, 3, 4], [("train_loss", "#111111", [0.3, 0.2, nan, 0.1], "left")],
                                    "epoch", "loss", marker=9, marker_label="kept: epoch 9"))
    runs = [line.get("points") for line in root.iter(f"{SVG}polyline")]
    assert len(runs) == 2 and "nan" not in " ".join(runs)
    assert not [line for line in root.iter(f"{SVG}line") if line.get("stroke-dasharray")]  # epoch 9: not drawn
    # A drift distance that is NaN or infinite, a name with a control character, a long name.
    uri = report_page.distance_plot([_drift("fare", nan), _drift("tips", inf), _drift("a\x01b" + "x" * 90, 0.5)])
    root = _parsed(uri)
    assert "nan" not in base64.b64decode(uri.split(",")[1]).decode().replace(">nan<", "")
    assert any(text.startswith("a\ufffdb") and len(text) == svg_charts._LONGEST_NAME for text in _texts(root))
    assert all(float(r.get("width")) >= 0 for r in root.iter(f"{SVG}rect"))
    # A constant feature: one bucket of no width, drawn in the middle of its axis.
    (x, width, height, *_), = _bars(_parsed(svg_charts.histogram("flag", [("a", "#111111", [(1.0, 1.0, 1.0)])])))
    assert width >= 2 and height > 0 and svg_charts._LEFT < x < svg_charts.WIDTH - svg_charts._RIGHT - width
    # Infinite bucket bounds are left out.
    assert _bars(_parsed(svg_charts.histogram("x", [("a", "#111111", [(-inf, 0.0, 0.5), (0.0, 1.0, 0.5)])])))


def _drift(feature, value):
    from pipeline.inspect.run_details import DriftMeasure

    return DriftMeasure(feature=feature, measure="L_INFTY", value=value, threshold=1.0)
