"""The config core's sizing of a run: the eval split stays near its row limit, and how many
rows it holds."""

import pytest

from pipeline import config


@pytest.mark.parametrize("rows, train_buckets", [(15_002, 4), (250_000, 4), (250_001, 5), (1_000_000, 19),
                                                  (5_000_000, 99)])
def test_the_eval_split_stays_near_its_row_limit(rows, train_buckets):
    evaluation = config.sized_evaluation(config.EvaluationConfig(), rows)
    assert (evaluation.train_buckets, evaluation.eval_buckets) == (train_buckets, 1)
    assert rows / (evaluation.train_buckets + 1) <= max(config.EvaluationConfig().max_eval_rows, rows / 5)


def test_the_eval_split_holds_its_share_of_the_buckets_or_in_window_mode_the_newest_span():
    sized = config.sized_evaluation(config.EvaluationConfig(), 1_000_000)
    assert config.eval_rows(sized, 1_000_000) == 50_000
    assert config.eval_rows(config.EvaluationConfig(), 15_000) == 3_000
    # A window's eval split is its newest span, whatever the hash buckets say.
    assert config.eval_rows(sized, 1_000_000, window_size=4) == 250_000
